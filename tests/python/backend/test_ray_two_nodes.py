"""`trainer capacity` and `trainer capacity scan` on a Ray cluster of two nodes: a head at
127.0.0.1 and a second node joined at 127.0.0.2, both on this machine (a head of their own, so the
other Ray tests keep their one-node cluster). The scan runs one job pinned to each node and
answers for each; the capacity report counts both nodes."""
from __future__ import annotations

import json
import pathlib
import tempfile

import pytest

from backend_support import Service, trainer_job_version
from clusters import RayHead

SECOND_NODE = "127.0.0.2"


@pytest.fixture(scope="module")
def two_nodes(repo):
    head = RayHead.start(repo, pathlib.Path(tempfile.mkdtemp(prefix="ray2-", dir="/tmp")))
    try:
        head.add_node(SECOND_NODE, cpus=1)
        yield head
    finally:
        head.stop()


def test_capacity_and_scan_answer_for_each_of_two_nodes(bin_dir, tiny_model, tmp_path, two_nodes):
    service = Service(bin_dir, tmp_path, tiny_model, {
        "compute": {"backend": "ray", "ray": {"address": two_nodes.address}},
        "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 1}],
    })
    try:
        nodes = two_nodes.alive_node_names()
        assert len(nodes) == 2 and SECOND_NODE in nodes, nodes
        cap = service.cli.json("capacity")
        assert cap["pools"][0]["observed"] == 2, cap["pools"]
        assert (cap["cluster"]["nodes"], cap["cluster"]["devices"]) == (2, {"cpu": 2}), cap["cluster"]

        out = service.cli("capacity", "scan", "-o", "json", timeout=300)
        assert out.returncode == 0, out.stderr
        scan = json.loads(out.stdout)
        assert sorted(n["node"] for n in scan["nodes"]) == sorted(nodes), scan
        version = trainer_job_version(bin_dir)
        for node in scan["nodes"]:
            assert "error" not in node, node
            assert node["version"] == version, node
            assert [d["role"] for d in node["disks"]] == ["data", "tmp", "shm"], node
        text = service.cli("capacity", "scan", check=True, timeout=300).stdout
        for name in nodes:
            assert f"Node {name} (trainer-job " in text, text
    finally:
        service.close()
