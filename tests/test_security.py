"""Secrets never shown; nothing that data or a store can carry is unpickled."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

import objectspace as osp
from objectspace.checkpoint import Receipt
from objectspace.cli import main
from objectspace.spark import StatefulRunner, TaskStats
from objectspace.spark.receipts import pack_receipt, unpack_receipt
from objectspace.storage.contract import StagedWrite
from objectspace.storage.urls import redact_text, redact_url
from tests.support.storage import segment_url

SECRETS = ("topsecret", "AKIAKEYID", "S3CRETVALUE", "T0KENVALUE", "PASSW0RD")


class _Payload:
    """Creates a marker file when unpickled."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.marker, "w"))


def _assert_clean(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, text


def _secret_segment_url(tmp_path: Path, catalog: str | None = None) -> str:
    return segment_url(
        f"file://{tmp_path}/seg",
        catalog or f"sqlite:///{tmp_path}/cat.db",
        key="AKIAKEYID",
        secret="S3CRETVALUE",
        token="T0KENVALUE",
        password="PASSW0RD",
    )


# -- redaction ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:topsecret@h:5/db?schema=s", "postgresql://u:***@h:5/db?schema=s"),
        ("postgres://u:top%40secret@h/db", "postgres://u:***@h/db"),
        ("postgresql://h/db?sslpassword=topsecret&x=1", "postgresql://h/db?sslpassword=***&x=1"),
        (
            "s3://b/p?key=AKIAKEYID&aws_secret_access_key=S3CRETVALUE&endpoint_url=http://e",
            "s3://b/p?key=***&aws_secret_access_key=***&endpoint_url=http://e",
        ),
        ("postgresql://u:topsecret@[bad/db", "postgresql://***"),
        ("sqlite:///state.db", "sqlite:///state.db"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_redact_url_masks_the_catalog_url_and_redact_text_masks_quoted_secrets() -> None:
    url = segment_url("s3://b/p", "postgresql://u:topsecret@h/db", secret="S3CRETVALUE")
    _assert_clean(redact_url(url))
    assert "catalog=postgresql://u:***@h/db" in redact_url(url)
    text = "failed: password=topsecret and S3CRETVALUE, S3CRETVALUE"
    assert redact_text(text, [url]) == "failed: password=*** and ***, ***"
    assert redact_url(None) == "<NoneType>"


def test_reprs_hide_secrets(tmp_path: Path) -> None:
    storage = osp.open_storage(_secret_segment_url(tmp_path))
    job = storage.job("j")
    op = job.operator("o", 4)
    runner = StatefulRunner(
        lambda key, rows, state: [],
        key="k",
        order_by="ts",
        output_schema="k long",
        storage=storage,
        job="j",
        operator="o",
        max_key_groups=4,
    )
    for shown in (storage, job, op, storage.backend, runner):
        _assert_clean(repr(shown))
        _assert_clean(str(shown))
    storage.close()


def test_postgres_errors_and_reprs_hide_the_password() -> None:
    url = "postgresql://u:topsecret@127.0.0.1:1/db?connect_timeout=2&sslpassword=PASSW0RD"
    storage = osp.open_storage(url)
    _assert_clean(repr(storage) + repr(storage.backend))
    with pytest.raises(osp.StorageError) as info:
        storage.job("j").operator("o", 4)
    _assert_clean(str(info.value))
    assert "u:***@127.0.0.1" in str(info.value)
    with pytest.raises(osp.StorageError) as info:
        osp.open_storage("postgresql://u:topsecret@h/db?pool_max=lots")
    _assert_clean(str(info.value))


def test_storage_url_errors_hide_secrets(tmp_path: Path) -> None:
    bad = [
        "postgresql://u:topsecret@h:99999/db",
        "sqlite://u:topsecret@h/x.db",
        "nope://u:topsecret@h/x?secret=S3CRETVALUE",
        f"file://{tmp_path}/seg?secret=S3CRETVALUE&level=max&catalog=sqlite:///{tmp_path}/c.db",
        f"file://{tmp_path}/seg?secret=S3CRETVALUE",
        f"file://{tmp_path}/seg?secret=S3CRETVALUE&catalog=nope://u:topsecret@h/",
    ]
    for url in bad:
        with pytest.raises(osp.StorageError) as info:
            osp.open_storage(url)
        _assert_clean(str(info.value))


def test_cli_output_and_errors_hide_secrets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _secret_segment_url(tmp_path)
    storage = osp.open_storage(url)
    job = storage.job("j")
    instance = job.operator("o", 4).instance(0, 1)
    instance.space_for_key("k").create_value("v", 1)
    job.commit(0, [instance.save(0)])
    storage.close()
    assert main(["inspect", url]) == 0
    assert main(["inspect", url, "--json"]) == 0
    assert main(["show", url, "--job", "nope", "--operator", "o", "--key", "k"]) == 1
    pg = "postgresql://u:topsecret@127.0.0.1:1/db?connect_timeout=2"
    assert main(["inspect", _secret_segment_url(tmp_path, pg)]) == 1
    assert main(["inspect", pg]) == 1
    assert main(["inspect", "postgresql://u:topsecret@h:99999/db"]) == 1
    assert main(["inspect", f"file://{tmp_path}/seg?secret=S3CRETVALUE&level=max"]) == 1
    out = capsys.readouterr()
    assert "objectspace: error" in out.err
    _assert_clean(out.out + out.err)


# -- receipts ---------------------------------------------------------------------------------


def _receipt() -> Receipt:
    staged = (StagedWrite("o", 5, 7, "abc", False, b"\x01block", 3, 9, -12),)
    return Receipt("j", "o", 1, 4, 7, 6, "abc", ((2, 11), (3, 12)), 100, 5, staged)


def test_receipt_row_round_trips_as_plain_fields() -> None:
    stats = TaskStats(index=1, keys=3, cached=True, seconds_total=0.5)
    assert unpack_receipt(pack_receipt(_receipt(), stats)) == (_receipt(), stats, None)
    assert unpack_receipt(pack_receipt(None, TaskStats(), b"x")) == (None, TaskStats(), b"x")
    assert b"\x80" not in pack_receipt(_receipt(), stats)[:1]  # not a pickle


def test_receipt_row_that_is_a_pickle_is_refused_unexecuted(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    for protocol in (0, 2, pickle.HIGHEST_PROTOCOL):
        blob = pickle.dumps((_receipt(), _Payload(str(marker))), protocol=protocol)
        with pytest.raises(osp.CheckpointError, match="malformed receipt"):
            unpack_receipt(blob)
    assert not marker.exists()


@pytest.mark.parametrize(
    "change",
    [
        lambda d: d.update(v=1),
        lambda d: d.pop("output"),
        lambda d: d.update(output="rows"),
        lambda d: d.update(extra=1),
        lambda d: d["receipt"].update(index="1"),
        lambda d: d["receipt"].update(writes=[[1]]),
        lambda d: d["receipt"].update(writes=[[1, 2**63]]),
        lambda d: d["receipt"].update(base=1.5),
        lambda d: d["receipt"].pop("attempt"),
        lambda d: d["receipt"].pop("staged"),
        lambda d: d["receipt"].update(staged=[[5, 7, False, b"b", 3, 9]]),
        lambda d: d["receipt"].update(staged=[[5, 7, 0, b"b", 3, 9, 1]]),
        lambda d: d["receipt"].update(staged=[[5, 7, False, "b", 3, 9, 1]]),
        lambda d: d["receipt"].update(staged=[[5, 7, False, b"b", 3, 9, 2**63]]),
        lambda d: d["receipt"].update(staged=[[5, 7, False, b"b", 3, 1.5, 1]]),
        lambda d: d["stats"].update(cached=1),
        lambda d: d["stats"].update(keys="3"),
    ],
)
def test_receipt_row_with_wrong_fields_is_refused(change: Any) -> None:
    import msgpack

    data = msgpack.unpackb(pack_receipt(_receipt(), TaskStats()))
    change(data)
    with pytest.raises(osp.CheckpointError, match="malformed receipt"):
        unpack_receipt(msgpack.packb(data))


# -- pickle is opt-in, never chosen by a store ------------------------------------------------


def test_state_written_with_pickle_is_not_unpickled_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "pwned"
    url = f"sqlite:///{tmp_path}/state.db"
    storage = osp.open_storage(url)
    job = storage.job("j")
    op = job.operator("o", 4, serializer=osp.PickleSerializer())
    instance = op.instance(0, 1)
    instance.space_for_key("k").create_value("v", _Payload(str(marker)))
    job.commit(0, [instance.save(0)])
    # A reader that did not ask for pickle: an error, and nothing unpickled.
    with pytest.raises(osp.ObjectSpaceError):
        dict(job.operator("o").instance(0, 1).spaces())
    assert main(["show", url, "--job", "j", "--operator", "o", "--key", "k"]) == 1
    assert main(["export", url, "--job", "j", "--operator", "o", "--to", str(tmp_path / "x")]) == 1
    capsys.readouterr()
    assert not marker.exists()
    # Asking for it explicitly unpickles (the documented, trusted-storage-only opt-in).
    dict(job.operator("o", serializer=osp.PickleSerializer()).instance(0, 1).spaces())
    assert marker.exists()
    storage.close()
