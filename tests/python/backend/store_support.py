"""Helpers of the tests of a cluster job's inputs through the S3 artifact store: the job's plan and
log in the run's folder, its losses, the bucket's objects as the real server lists them, and the
inputs trainerd's log says it staged."""
from __future__ import annotations

import json
import re
import subprocess
import xml.etree.ElementTree as ET

from backend_support import Service

STAGED = re.compile(r"trainerd: staged input (\S+)")


def job_plan(svc: Service, run_id: str) -> dict:
    return json.loads((svc.daemon.data_dir / "runs" / run_id / "attempt-1" / "plan.json").read_text())


def job_log(svc: Service, run_id: str) -> str:
    return (svc.daemon.data_dir / "runs" / run_id / "attempt-1" / "job.log").read_text(errors="replace")


def losses(svc: Service, run_id: str) -> dict[int, float]:
    return {m["step"]: m["loss"] for m in svc.metrics(run_id)}


def bucket_objects(s3, bucket: str, prefix: str) -> dict[str, tuple[str, str]]:
    """key -> (ETag, LastModified) of every object under `prefix` in `bucket`, read from the real server."""
    out = subprocess.run(["curl", "-sf", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                          f"{s3.access_key}:{s3.secret_key}",
                          f"{s3.endpoint}/{bucket}?list-type=2&max-keys=1000&prefix={prefix.replace('/', '%2F')}"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"listing the bucket failed: curl exit {out.returncode}"
    ns = {"s3": "http://s3.amazonaws.com/doc/2006-03-01/"}
    root = ET.fromstring(out.stdout)
    return {c.find("s3:Key", ns).text: (c.find("s3:ETag", ns).text, c.find("s3:LastModified", ns).text)
            for c in root.findall("s3:Contents", ns)}


def staged_lines(svc: Service) -> list[str]:
    return STAGED.findall(svc.daemon.log_text())
