"""The S3 implementation of the artifact storage against a real S3-compatible server that checks
signatures (SeaweedFS's weed on loopback): the C++ tests of tests/unit/storage/s3_storage_test.cpp
(put/get/list/remove, folder publication with conflicts, multipart uploads, a wrong secret
refused with 403, an absent server given up within the deadline), run here with the server's
address and keys. Also: an unsigned request and a wrongly signed one are refused by the server
itself, so the acceptance of our requests means their signatures were checked."""
from __future__ import annotations

import os
import subprocess
import urllib.error
import urllib.request

import pytest


def test_the_s3_storage_passes_its_tests_against_the_real_server(bin_dir, s3_server):
    binary = bin_dir.parent / "tests" / "unit" / "storage" / "s3_storage_test"
    assert binary.exists(), f"{binary} is not built (tools/setup builds it)"
    env = dict(os.environ, TRAINER_TEST_S3_ENDPOINT=s3_server.endpoint,
               TRAINER_TEST_S3_ACCESS_KEY=s3_server.access_key, TRAINER_TEST_S3_SECRET_KEY=s3_server.secret_key)
    out = subprocess.run([str(binary)], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert "[  PASSED  ] 6 tests." in out.stdout, out.stdout[-3000:]


def test_the_server_refuses_unsigned_and_wrongly_signed_requests(s3_server):
    with pytest.raises(urllib.error.HTTPError) as unsigned:
        urllib.request.urlopen(s3_server.endpoint + "/trainer-tests/basic/a/two.bin", timeout=10)
    assert unsigned.value.code == 403
    wrong = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--aws-sigv4", "aws:amz:us-east-1:s3",
                            "--user", f"{s3_server.access_key}:wrong-secret", s3_server.endpoint + "/trainer-tests/"],
                           capture_output=True, text=True, timeout=30)
    assert wrong.stdout == "403", wrong.stdout
    right = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--aws-sigv4", "aws:amz:us-east-1:s3",
                            "--user", f"{s3_server.access_key}:{s3_server.secret_key}", s3_server.endpoint + "/trainer-tests/"],
                           capture_output=True, text=True, timeout=30)
    assert right.stdout in ("200", "404"), right.stdout  # accepted: the bucket listed, or not made yet
