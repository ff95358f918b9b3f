"""`python -m evidence.tools.standin`: the stand-in server from the command line."""

from evidence.tools.standin.serve import main

main()
