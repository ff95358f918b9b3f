"""python -m evidence.cli"""

from evidence.cli.main import main

main()
