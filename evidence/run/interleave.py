"""Another client (e.g. `vllm bench serve`) against the same server, right after a trial."""

from __future__ import annotations

import subprocess
import time

from evidence.canon import write_json
from evidence.run.session import served_name
from evidence.rundir import INTERLEAVED_COMMAND, INTERLEAVED_LOG, RunDir
from evidence.spec.model import Spec
from evidence.spec.plan import Trial


def run_interleaved(template: str, spec: Spec, rd: RunDir, engine, trial: Trial) -> None:
    """Run the command template once against the server that just measured `trial`.

    Its output goes to interleaved/<trial>/ (never into trials/), so our records stay
    clean and the two clients can be compared on the same server and workload. The
    template's {base_url} {model} {point} {prompts} {trial} {out} {input_len} {output_len}
    {seed} are filled in; the command runs through the shell.
    """
    out = rd.numbered(rd.interleaved_dir / trial.id).resolve()
    out.mkdir(parents=True)
    w = spec.workload
    cmd = template.format(base_url=engine.base_url, model=served_name(spec), point=trial.point, prompts=trial.prompts,
                          trial=trial.id, out=str(out), input_len=w.input_len, output_len=w.output_len,
                          seed=w.seed)
    rd.event("interleaved_start", trial=trial.id, command=cmd)
    t = time.monotonic()
    with open(out / INTERLEAVED_LOG, "wb") as log:
        rc = subprocess.call(cmd, shell=True, stdout=log, stderr=subprocess.STDOUT, cwd=out)
    write_json(out / INTERLEAVED_COMMAND, {"command": cmd, "exit_code": rc, "seconds": round(time.monotonic() - t, 3),
                                      "trial": trial.id, "point": trial.point})
    rd.event("interleaved_done", trial=trial.id, exit_code=rc)
