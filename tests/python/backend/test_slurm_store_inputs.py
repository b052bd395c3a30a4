"""A Slurm job's inputs through the S3 artifact store (issue 13): a real trainerd on the Slurm
backend (the session's real slurmctld + slurmd) with the session's real SeaweedFS `weed` as its
`artifactStore`. trainerd stages the base model and the dataset in the bucket before sbatch; the
batch job's plan names s3:// URIs, trainer-job fetches and checks them on the node and trains the
same losses, bit for bit, as the same plan on Slurm reading trainerd's data folder."""
from __future__ import annotations

import json
import os

from backend_support import Service
from store_support import bucket_objects, job_log, job_plan, losses, staged_lines

BUCKET = "trainer-slurm-inputs"
ROOT = f"s3://{BUCKET}"


def slurm_config(slurm) -> dict:
    return {"compute": {"backend": "slurm", "slurm": {"slurmConf": str(slurm.conf)}},
            "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 1}]}


def completed_run(svc: Service) -> str:
    run_id = svc.start(max_steps=3)["runId"]
    svc.wait_phase(run_id, "COMPLETED")
    return run_id


def test_a_slurm_job_trains_from_inputs_staged_in_the_store(bin_dir, tiny_model, tmp_path, slurm, s3_server):
    host = Service(bin_dir, tmp_path / "host", tiny_model, slurm_config(slurm)).ready()
    try:
        reference = losses(host, completed_run(host))
    finally:
        host.close()
    os.environ["TRAINER_TEST_S3_KEY"] = s3_server.access_key
    os.environ["TRAINER_TEST_S3_SECRET"] = s3_server.secret_key
    svc = Service(bin_dir, tmp_path / "store", tiny_model, {
        **slurm_config(slurm),
        "artifactStore": {"uri": ROOT, "endpoint": s3_server.endpoint, "accessKeyEnv": "TRAINER_TEST_S3_KEY",
                          "secretKeyEnv": "TRAINER_TEST_S3_SECRET", "inputCache": str(tmp_path / "node-cache")},
    }).ready()
    try:
        run_id = completed_run(svc)
        run = svc.get(run_id)
        assert run["placement"]["backend"] == "slurm"
        plan = job_plan(svc, run_id)
        assert plan["baseModel"] == f"{ROOT}/inputs/models/{run['baseModelHash']}"
        assert plan["config"]["dataset"] == f"{ROOT}/inputs/datasets/{run['dataset']['hash']}.jsonl"
        assert str(svc.daemon.data_dir) not in json.dumps(plan)
        assert f"inputs/datasets/{run['dataset']['hash']}.jsonl" in bucket_objects(s3_server, BUCKET, "inputs/")
        assert len(staged_lines(svc)) == 2
        log = job_log(svc, run_id)
        assert f"baseModel {plan['baseModel']}: fetched" in log, log[-3000:]
        assert f"config.dataset {plan['config']['dataset']}: fetched" in log, log[-3000:]
        assert losses(svc, run_id) == reference  # bit for bit
    finally:
        svc.close()
