"""The kv0 command-line tool, run as a user would."""

import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
KV0 = ROOT / "build" / "kv0"

pytestmark = pytest.mark.skipif(not KV0.exists(), reason="build/kv0 is built by scripts/setup.sh")


def kv0(*args, env_wal, check=True):
    result = subprocess.run([str(KV0), *map(str, args)], capture_output=True, text=True,
                            env={"KV0_WAL_DIR": str(env_wal), "PATH": "/usr/bin:/bin"})
    if check and result.returncode != 0:
        raise AssertionError(f"kv0 {args} failed: {result.stderr}")
    return result


def test_version():
    out = subprocess.run([str(KV0), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("kv0 0.2.0") and "lance 14." in out.stdout


def test_key_value_commands(tmp_path):
    db, wal = tmp_path / "db", tmp_path / "wal"
    for key in ["a", "b", "c", "d"]:
        kv0("put", db, key, key.upper(), env_wal=wal)
    kv0("put", db, "0x00ff", "0xdeadbeef", env_wal=wal)
    assert kv0("get", db, "b", env_wal=wal).stdout == "B\n"
    assert kv0("get", db, "0x00ff", env_wal=wal).stdout == "0xdeadbeef\n"
    missing = kv0("get", db, "zz", env_wal=wal, check=False)
    assert missing.returncode == 1 and "not found" in missing.stderr

    kv0("delete", db, "a", env_wal=wal)
    scan = kv0("scan", db, env_wal=wal).stdout.splitlines()
    assert scan == ["0x00ff\t0xdeadbeef", "b\tB", "c\tC", "d\tD"]
    ranged = kv0("scan", db, "--start", "b", "--end", "d", env_wal=wal).stdout.splitlines()
    assert ranged == ["b\tB", "c\tC"]
    rev = kv0("scan", db, "--reverse", "--limit", "2", env_wal=wal).stdout.splitlines()
    assert rev == ["d\tD", "c\tC"]
    rev_end = kv0("scan", db, "--reverse", "--end", "d", "--start", "b", env_wal=wal)
    assert rev_end.stdout.splitlines() == ["c\tC", "b\tB"]

    kv0("delete-range", db, "b", "d", env_wal=wal)
    assert kv0("scan", db, env_wal=wal).stdout.splitlines() == ["0x00ff\t0xdeadbeef", "d\tD"]

    versions = kv0("versions", db, env_wal=wal).stdout.splitlines()
    assert len(versions) >= 8
    assert "compacted" in kv0("compact", db, env_wal=wal).stdout
    info = kv0("info", db, env_wal=wal).stdout
    assert "seq: uint64" in info and "value: binary?" in info and "fragments:" in info


def test_bad_input_is_reported(tmp_path):
    wal = tmp_path / "wal"
    bad_hex = kv0("put", tmp_path / "db", "0xzz", "v", env_wal=wal, check=False)
    assert bad_hex.returncode == 2 and "hex" in bad_hex.stderr
    usage = kv0("get", tmp_path / "db", env_wal=wal, check=False)
    assert usage.returncode == 2 and "usage" in usage.stderr
    missing = kv0("info", tmp_path / "nothing", env_wal=wal, check=False)
    assert missing.returncode == 1 and "NotFound" in missing.stderr
