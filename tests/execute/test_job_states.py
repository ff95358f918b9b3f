"""Slurm states as they are (issue 23), with stand-ins for the job and the scheduler's answers: the
states here (a job that vanished, a node that failed, a preemption Slurm requeued) cannot be made
on demand by the test cluster in seconds. What the submitting command records is what it reads."""

from __future__ import annotations

import pytest

from evidence.execute import jobs
from evidence.execute.backends import Settings


class WouldWaitForever(BaseException):
    """submitit's result() on a job that left no result file and no accounting: it never returns."""


class FakeJob:
    def __init__(self, job_id: str, result=None, done=lambda: False):
        self.job_id, self._result, self._done = job_id, result, done

    def done(self) -> bool:
        return self._done()

    def result(self):
        if self._result is None:
            raise WouldWaitForever(self.job_id)
        return self._result() if callable(self._result) else self._result


def _settings() -> Settings:
    return Settings(kind="slurm")


@pytest.fixture(autouse=True)
def fast(monkeypatch):
    monkeypatch.setattr(jobs, "POLL_S", 0.01, raising=False)
    monkeypatch.setattr(jobs, "VANISHED_S", 0.2, raising=False)
    monkeypatch.setattr(jobs, "RESULT_GRACE_S", 0.2, raising=False)


def _result(code: int) -> dict:
    return {"exit_code": code, "node": {"slurm_node": "n1"}, "run": None, "stderr_tail": "" if code == 0 else "x"}


def test_a_job_that_vanished_without_a_result_is_lost_after_a_bounded_wait(monkeypatch):
    monkeypatch.setattr(jobs, "slurm_state", lambda job_id: {})
    out = jobs._outcome(FakeJob("7"), _settings())
    assert out["state"] == "LOST" and "job 7 vanished" in out["error"] and "no result" in out["error"]


def test_a_node_failure_without_a_result_is_node_fail(monkeypatch):
    monkeypatch.setattr(jobs, "slurm_state", lambda job_id: {"JobState": "NODE_FAIL", "Restarts": "0"})
    out = jobs._outcome(FakeJob("8"), _settings())
    assert out["state"] == "NODE_FAIL" and "ended (NODE_FAIL) but it left no result" in out["error"]


def test_a_preempted_job_slurm_requeued_is_followed_to_its_end(monkeypatch):
    # the first attempt's runner stopped cleanly (exit 130) and wrote its result; Slurm requeued the
    # job, which runs again (resuming the run) and completes
    answers = iter(
        [{"JobState": "PENDING", "Restarts": "1", "Reason": "BeginTime"}] * 3
        + [{"JobState": "RUNNING", "Restarts": "1"}] * 3
    )
    final = {"JobState": "COMPLETED", "Restarts": "1", "ExitCode": "0:0"}
    state = {"now": None}

    def scontrol(job_id):
        state["now"] = next(answers, final)
        return state["now"]

    monkeypatch.setattr(jobs, "slurm_state", scontrol)
    job = FakeJob("9", result=lambda: _result(0 if state["now"] is final else 130), done=lambda: True)
    out = jobs._outcome(job, _settings())
    assert out["state"] == "COMPLETED" and out["exit_code"] == 0 and out["requeues"] == 1


def test_a_time_limit_is_timeout_not_lost(monkeypatch):
    # SIGUSR2 before the limit: the runner stops cleanly (130); the scheduler then says TIMEOUT
    monkeypatch.setattr(jobs, "slurm_state", lambda job_id: {"JobState": "TIMEOUT", "Restarts": "0"})
    out = jobs._outcome(FakeJob("10", result=_result(130), done=lambda: True), _settings())
    assert out["state"] == "TIMEOUT" and out["exit_code"] == 130 and "requeues" not in out


def test_a_runs_folder_the_nodes_cannot_see_is_named_before_submitting(monkeypatch, tmp_path):
    from pathlib import Path

    from evidence.execute import backends

    spec = tmp_path / "s.yaml"
    spec.write_text(Path(__file__).resolve().parents[2].joinpath("specs", "standin-demo.yaml").read_text())
    monkeypatch.setattr(backends, "node_hosts", lambda: ["gpu-node-7"])  # the nodes are other machines
    fs, _ = backends._fs_type(tmp_path)
    if fs not in backends.LOCAL_FS:
        pytest.skip(f"{tmp_path} is on {fs}, not a local file system")
    said = []

    class Submitted(Exception):
        pass

    def no_submit(*a, **k):
        raise Submitted

    monkeypatch.setattr(jobs, "make_executor", no_submit)
    with pytest.raises(Submitted):
        jobs.execute(
            "replicate",
            jobs.host_slots(spec, 2),
            tmp_path / "runs" / "p",
            _settings(),
            repo_root=tmp_path,
            say=said.append,
        )
    (warn,) = [s for s in said if s.startswith("warning:")]
    assert f"{fs} file system" in warn and "gpu-node-7" in warn and "shared file system" in warn
    monkeypatch.setattr(backends, "node_hosts", lambda: [__import__("socket").gethostname()])
    assert backends.folder_visibility_note(tmp_path) is None  # nodes on this very host see its disk
