"""Child process for one driver run: ``python -m bench.drivers JOB_JSON RESULT_PATH``.

Writes a JSON object to RESULT_PATH: the tally's figures plus ``ok`` and, on failure,
``error``. Exit status 0 when the run completed, 1 otherwise.
"""
from __future__ import annotations

import json
import sys
import traceback


def _redacted(settings: dict) -> dict:
    """Settings for the report, with credentials replaced (they are test credentials, but a
    report is shared)."""
    from kclient.config import SECRET_SETTINGS
    secret = set(SECRET_SETTINGS) | {k.replace(".", "_") for k in SECRET_SETTINGS} | {"sasl.password"}
    return {k: ("[hidden]" if k in secret else v) for k, v in settings.items()}


def main(argv: list[str]) -> int:
    job_json, result_path = argv
    from bench.drivers import load
    from bench.drivers._common import InvalidRun, Job, Tally

    job = Job(**json.loads(job_json))
    result: dict = {"driver": job.driver, "mode": job.mode, "ok": False}
    tally = None
    try:
        module = load(job.driver)
        result["label"] = module.LABEL
        result["version"] = module.version()
        if hasattr(module, "prepare"):
            module.prepare()
        tally = Tally(job)
        settings = module.consume(job, tally)
        result["settings"] = _redacted(settings or {})
        for check in tally.after_window:
            check()
        if not tally.done:
            result["error"] = (f"consumed {tally.count:,} of {tally.target:,} records within "
                               f"{job.timeout_s:.0f} s")
        else:
            result["ok"] = True
    except InvalidRun as exc:
        result["error"] = f"invalid data: {exc}"
    except Exception as exc:  # reported, never hidden: the run is marked invalid
        result["error"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()
    if tally is not None:
        result.update(tally.result())
        result.update(tally.extra_results)
        if not result["ok"]:
            result["complete"] = False
    with open(result_path, "w") as f:
        json.dump(result, f)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
