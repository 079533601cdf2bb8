import kv0
import pytest


def test_version_and_lance():
    assert kv0.__version__ == "0.2.0"
    assert "lance 14." in kv0.lance_version()


def test_errors_derive_from_builtin_kinds():
    assert issubclass(kv0.errors.NotFound, FileNotFoundError)
    assert issubclass(kv0.errors.StoreIOError, OSError)
    assert issubclass(kv0.errors.InvalidArgument, ValueError)
    for name in ["NotFound", "StoreIOError", "Corruption", "NotSupported", "InvalidArgument",
                 "Busy", "Conflict"]:
        assert issubclass(getattr(kv0.errors, name), kv0.errors.Error)


def test_native_errors_arrive_as_kv0_errors(tmp_path):
    with pytest.raises(kv0.errors.NotFound):
        kv0.lance.scan(str(tmp_path / "missing.lance"))
    with pytest.raises(FileNotFoundError):
        kv0.lance.scan(str(tmp_path / "missing.lance"))
