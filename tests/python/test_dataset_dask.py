"""tensorsafe.dask: a dataset written from a dask bag and a dask dataframe by
the workers of a distributed.LocalCluster bound to 127.0.0.1, merged on the
client."""

import numpy as np
import pytest

import tensorsafe as ts
from tensorsafe import dataset as tds

db = pytest.importorskip("dask.bag")
distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    # In-process workers keep the test quick (worker processes would each
    # import torch through tensorsafe.dataset); the tasks still run on the
    # cluster's workers, the merge on the client. Scheduler, workers and
    # client talk TCP over 127.0.0.1, as a real cluster's would.
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                       protocol="tcp://", host="127.0.0.1",
                                       dashboard_address=None, worker_dashboard_address=None)
    assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def sample(i):
    return {"x": np.arange(i % 5, dtype=np.float32), "label": i, "name": f"s{i}"}


def test_write_bag(client, tmp_path):
    from tensorsafe.dask import write_bag

    bag = db.from_sequence(range(100), npartitions=5).map(sample)
    r = write_bag(bag, tmp_path / "ds", schema={"x": ("f32", (None,)), "label": "int", "name": "str"},
                  shard_samples=8, sync=False, metadata={"by": "dask"})
    assert r["samples"] == 100
    ds = tds.Dataset(tmp_path / "ds")
    assert ds.metadata == {"by": "dask"}
    assert sorted(p.name for p in (tmp_path / "ds").iterdir() if p.is_dir()) == [f"part-0000{i}" for i in range(5)]
    for i, s in enumerate(ds):
        assert s["label"] == i and s["name"] == f"s{i}"
        assert s["x"].tolist() == list(range(i % 5))
    assert tds.verify(tmp_path / "ds") == []


def test_write_bag_schema_mismatch(client, tmp_path):
    from tensorsafe.dask import write_bag

    bag = db.from_sequence(range(4), npartitions=2).map(lambda i: {"x": i} if i < 2 else {"x": str(i)})
    with pytest.raises(ts.FailedPreconditionError, match="part-0000"):
        write_bag(bag, tmp_path / "ds", sync=False)


def test_write_dataframe(client, tmp_path):
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    from tensorsafe.dask import write_dataframe

    pdf = pd.DataFrame({"a": np.arange(30, dtype=np.int64), "b": np.linspace(0, 1, 30),
                        "c": [f"r{i}" for i in range(30)]})
    df = dd.from_pandas(pdf, npartitions=3)
    r = write_dataframe(df, tmp_path / "ds", columns=["c", "a", "b"], sync=False)
    assert r["samples"] == 30
    ds = tds.Dataset(tmp_path / "ds")
    assert [(f["name"], f["kind"]) for f in ds.schema] == [("c", "str"), ("a", "int"), ("b", "float")]
    assert [s["a"] for s in ds] == list(range(30))
    assert ds[7] == {"c": "r7", "a": 7, "b": pdf["b"][7]}
