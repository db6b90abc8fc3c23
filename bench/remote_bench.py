#!/usr/bin/env python3
"""Datasets and tensor files over S3: tensorsafe beside MosaicML streaming and
boto3, against one local S3 server (moto_server on 127.0.0.1) in one run
(docs/remote-bench.md).

  first epoch   a dataset of N x S-byte samples (one `bytes` field) on the
                server, iterated once in index order from an empty cache
                directory by one process: tensorsafe's StreamingDataset on
                the native copy and on the MDS copy, and MosaicML's
                StreamingDataset(remote="s3://...") on the MDS copy (its
                S3_ENDPOINT_URL points it at the server; batch_size=256, as
                bench/dataset_python_bench.py explains).
  file save     the same file stored at a URL (moto only: nginx takes no
                uploads): tensorsafe.numpy.save_file(url) against
                safetensors' save_file to a local file + boto3 upload_file
                (the same bytes, checked).
  file load     one safetensors file of --file-mib MiB (16 f32 tensors):
                tensorsafe.numpy.load_file(url) into memory, against boto3's
                download_file (default TransferConfig: 10 threads, 8 MiB
                parts) to a local file, the same download then read with
                safetensors.numpy.load_file, and runai-model-streamer when it
                is installed.

Each figure is the best of --repeat runs, each from an empty cache. moto's
server is a Python process on the same 2 cores as the client, so absolute
figures are the server's; ratios measured in one run are the result.
--server nginx serves the same objects path-style from files (GET and HEAD
with ranges, what every reader here sends; SigV4 headers are ignored): a
server fast enough that the clients, not it, set the pace.

Usage: .venv/bin/python bench/remote_bench.py [--quick] [--repeat N] [--server moto|nginx] [--out FILE]
.venv's runai-model-streamer has no S3 plugin ("S3 not supported"): install
both beside it, `pip install --no-deps --target DIR runai-model-streamer==0.17.1
runai-model-streamer-s3==0.17.1 humanize`, and run with PYTHONPATH=DIR. Its
AWS SDK fails against moto; it works against --server nginx.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
from moto_s3 import BUCKET, MOTO, Moto  # noqa: E402

import boto3  # noqa: E402

import tensorsafe.numpy as tsn  # noqa: E402
from tensorsafe import dataset as tds  # noqa: E402


def best(repeat, fn):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


class Nginx:
    """nginx on 127.0.0.1 serving www/<bucket>/<key> at /<bucket>/<key>; www is
    in /dev/shm when there is one, so that the server's storage is memory and
    the client's cache alone writes to the disk under test."""

    def __init__(self, work):
        import socket
        import subprocess

        shm = "/dev/shm" if os.path.isdir("/dev/shm") else work
        self.www, run = tempfile.mkdtemp(prefix="remote-bench-www-", dir=shm), os.path.join(work, "nginx")
        os.makedirs(os.path.join(self.www, BUCKET))
        os.makedirs(run)
        os.chmod(self.www, 0o755)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        user = "user root;\n" if os.geteuid() == 0 else ""
        temps = "".join(f"  {k}_temp_path {run}/{k};\n" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
        conf = os.path.join(run, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"{user}daemon off;\nworker_processes 2;\npid {run}/nginx.pid;\n"
                    f"error_log {run}/error.log warn;\nevents {{ worker_connections 256; }}\nhttp {{\n"
                    f"  access_log off;\n  sendfile on;\n  keepalive_requests 100000;\n{temps}  types {{ }}\n"
                    f"  default_type application/octet-stream;\n"
                    f"  server {{ listen 127.0.0.1:{port}; location / {{ root {self.www}; }} }}\n}}\n")
        self.proc = subprocess.Popen(["/usr/sbin/nginx", "-p", f"{run}/", "-c", conf, "-e", f"{run}/error.log"])
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        self.endpoint = f"http://127.0.0.1:{port}"

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        shutil.rmtree(self.www, ignore_errors=True)


SERVER = None  # the Nginx when --server nginx (uploads are file copies)
KEYS = {}  # prefix -> keys uploaded under it


def put(client, local, key):
    if SERVER is not None:
        dest = os.path.join(SERVER.www, BUCKET, key)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(local, dest)
    else:
        client.upload_file(local, BUCKET, key)


def upload_dir(client, local, prefix):
    for name in sorted(os.listdir(local)):
        put(client, os.path.join(local, name), f"{prefix}/{name}")
        KEYS.setdefault(prefix, []).append(f"{prefix}/{name}")
    return f"s3://{BUCKET}/{prefix}"


def make_datasets(client, work, n, size, tag):
    import streaming

    rng = np.random.default_rng(7)
    payload = [rng.bytes(size) for _ in range(min(n, 1024))]
    native, mds = os.path.join(work, f"native-{tag}"), os.path.join(work, f"mds-{tag}")
    with tds.Writer(native, shard_bytes=64 << 20, sync=False) as w:
        for i in range(n):
            w.add({"data": payload[i % len(payload)]})
    with streaming.MDSWriter(out=mds, columns={"data": "bytes"}, size_limit=64 << 20) as w:
        for i in range(n):
            w.write({"data": payload[i % len(payload)]})
    urls = upload_dir(client, native, f"bench/native-{tag}"), upload_dir(client, mds, f"bench/mds-{tag}")
    shutil.rmtree(native)
    shutil.rmtree(mds)
    return urls


def epoch_tensorsafe(url, cache):
    def run():
        shutil.rmtree(cache, ignore_errors=True)
        total = 0
        for s in tds.StreamingDataset(url, shuffle=False, cache_dir=cache):
            total += len(s["data"])
        return total
    return run


def download_all(client, url, cache):
    """The server's ceiling for the same bytes: boto3 download_file of every
    object under the prefix, one after another (each with its threads)."""
    prefix = url[len(f"s3://{BUCKET}/"):]

    def run():
        shutil.rmtree(cache, ignore_errors=True)
        os.makedirs(cache)
        for key in KEYS[prefix]:
            client.download_file(BUCKET, key, os.path.join(cache, os.path.basename(key)))
    return run


def epoch_mosaic(url, cache):
    import streaming
    from streaming.base.util import clean_stale_shared_memory

    def run():
        shutil.rmtree(cache, ignore_errors=True)
        clean_stale_shared_memory()
        ds = streaming.StreamingDataset(remote=url, local=cache, shuffle=False, batch_size=256)
        total = 0
        for s in ds:
            total += len(s["data"])
        del ds
        return total
    return run


def file_load(client, work, mib, repeat):
    rng = np.random.default_rng(3)
    per = (mib << 20) // 16 // 4
    tensors = {f"layer{i}.w": rng.standard_normal(per, dtype=np.float32) for i in range(16)}
    path = os.path.join(work, "model.safetensors")
    tsn.save_file(tensors, path)
    key = "bench/model.safetensors"
    put(client, path, key)
    os.remove(path)
    url = f"s3://{BUCKET}/{key}"
    nbytes = sum(t.nbytes for t in tensors.values())
    rows = {}

    def ts_load():
        got = tsn.load_file(url)
        assert got["layer3.w"][5] == tensors["layer3.w"][5]

    rows["tensorsafe.numpy.load_file(s3 URL)"] = best(repeat, ts_load)
    dest = os.path.join(work, "download.safetensors")

    def boto_download():
        client.download_file(BUCKET, key, dest)

    rows["boto3 download_file (to a local file)"] = best(repeat, boto_download)

    def boto_then_load():
        client.download_file(BUCKET, key, dest)
        import safetensors.numpy as stn
        got = stn.load_file(dest)
        assert got["layer3.w"][5] == tensors["layer3.w"][5]

    rows["boto3 download_file + safetensors load_file"] = best(repeat, boto_then_load)
    os.remove(dest)
    try:
        from runai_model_streamer import SafetensorsStreamer

        def runai():
            with SafetensorsStreamer() as s:
                s.stream_file(url)
                for _name, _t in s.get_tensors():
                    pass

        try:
            rows["runai-model-streamer"] = best(repeat, runai)
        except Exception as e:  # noqa: BLE001 - reported in the table, the run goes on
            rows["runai-model-streamer"] = f"failed: {str(e)[:120]}"
    except ImportError:
        rows["runai-model-streamer"] = None
    return nbytes, rows


def file_save(client, work, mib, repeat):
    """The same file stored at a URL: tensorsafe.numpy.save_file(url) (written
    under $TMPDIR, then one multipart upload) against safetensors'
    save_file to a local file and boto3's upload_file of it."""
    import safetensors.numpy as stn

    rng = np.random.default_rng(4)
    per = (mib << 20) // 16 // 4
    tensors = {f"layer{i}.w": rng.standard_normal(per, dtype=np.float32) for i in range(16)}
    nbytes = sum(t.nbytes for t in tensors.values())
    local = os.path.join(work, "save.safetensors")
    rows = {}

    def ts_save():
        tsn.save_file(tensors, f"s3://{BUCKET}/bench/saved-ts.safetensors")

    def st_then_upload():
        stn.save_file(tensors, local)
        client.upload_file(local, BUCKET, "bench/saved-st.safetensors")
        os.remove(local)

    rows["tensorsafe.numpy.save_file(s3 URL)"] = best(repeat, ts_save)
    rows["safetensors save_file + boto3 upload_file"] = best(repeat, st_then_upload)
    same = (client.get_object(Bucket=BUCKET, Key="bench/saved-ts.safetensors")["Body"].read()
            == client.get_object(Bucket=BUCKET, Key="bench/saved-st.safetensors")["Body"].read())
    assert same, "the two objects differ"
    return nbytes, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20,000 x 1 KiB, 200 x 1 MiB, a 128 MiB file")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--file-mib", type=int, default=None, help="the tensor file's size (default 1024; --quick 128)")
    ap.add_argument("--out", default=None, help="write the markdown report here")
    ap.add_argument("--only", default="datasets,file,save",
                    help="datasets, file (load), save (moto only), comma-separated")
    ap.add_argument("--server", choices=("moto", "nginx"), default="moto")
    ap.add_argument("--sizes", default="1k,1m", help="the datasets' sample sizes: 1k, 1m or both")
    args = ap.parse_args()
    if args.server == "moto" and MOTO is None:
        sys.exit("moto_server is not installed (pip install 'moto[server]')")
    small, large = (20_000, 200) if args.quick else (200_000, 2_000)
    file_mib = args.file_mib or (128 if args.quick else 1024)
    work = tempfile.mkdtemp(prefix="remote-bench-")
    global SERVER
    if args.server == "nginx":
        server = SERVER = Nginx(work)
    else:
        server = Moto(os.path.join(work, "moto.log"))
    # S3_ENDPOINT_URL: MosaicML's; the RUNAI_ ones: path-style requests to a
    # plain-http endpoint for runai-model-streamer's AWS SDK.
    env = dict(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_REGION="us-east-1",
               AWS_ENDPOINT_URL=server.endpoint, S3_ENDPOINT_URL=server.endpoint, AWS_EC2_METADATA_DISABLED="true",
               RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING="0")
    os.environ.update(env)
    client = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1")
    if SERVER is None:
        client.create_bucket(Bucket=BUCKET)
    lines = []
    try:
        only = set(args.only.split(","))
        sizes = [(n, size, tag) for n, size, tag in ((small, 1024, "1k"), (large, 1 << 20, "1m"))
                 if tag in args.sizes.split(",")]
        for n, size, tag in sizes if "datasets" in only else ():
            native, mds = make_datasets(client, work, n, size, tag)
            cache = os.path.join(work, "cache")
            t_ts = best(args.repeat, epoch_tensorsafe(native, cache))
            t_ts_mds = best(args.repeat, epoch_tensorsafe(mds, cache))
            t_mosaic = best(args.repeat, epoch_mosaic(mds, cache))
            t_ceiling = best(args.repeat, download_all(client, native, cache))
            mib = n * size / (1 << 20)
            ceiling = " (the server's ceiling)" if SERVER is None else ""
            lines.append(f"| {n:,} x {size // 1024} KiB, first epoch | tensorsafe, native shards | "
                         f"{t_ts:.2f} s | {n / t_ts:,.0f} samples/s, {mib / t_ts:.0f} MiB/s | "
                         f"**{t_mosaic / t_ts:.2f}x** |")
            lines.append(f"| | tensorsafe, the MDS copy | {t_ts_mds:.2f} s | {n / t_ts_mds:,.0f} samples/s | "
                         f"**{t_mosaic / t_ts_mds:.2f}x** |")
            lines.append(f"| | MosaicML StreamingDataset (baseline) | {t_mosaic:.2f} s | "
                         f"{n / t_mosaic:,.0f} samples/s | 1.00x |")
            lines.append(f"| | boto3 download_file of the native shards, no decoding{ceiling} | "
                         f"{t_ceiling:.2f} s | {mib / t_ceiling:.0f} MiB/s | {t_mosaic / t_ceiling:.2f}x |")
            print("\n".join(lines[-4:]), flush=True)
        nbytes, rows = file_load(client, work, file_mib, args.repeat) if "file" in only else (0, {})
        base = rows.get("boto3 download_file (to a local file)")
        first = True
        for name, t in rows.items():
            label = f"{nbytes >> 20} MiB safetensors, load" if first else ""
            first = False
            if t is None:
                lines.append(f"| {label} | {name} | not installed | | |")
            elif isinstance(t, str):
                lines.append(f"| {label} | {name} | {t} | | |")
            else:
                lines.append(f"| {label} | {name} | {t:.2f} s | {nbytes / t / (1 << 20):.0f} MiB/s | "
                             f"**{base / t:.2f}x** |")
        if rows:
            print("\n".join(lines[-len(rows):]), flush=True)
        if "save" in only and SERVER is None:  # nginx takes no uploads
            nbytes, rows = file_save(client, work, file_mib, args.repeat)
            base = rows["safetensors save_file + boto3 upload_file"]
            for k, (name, t) in enumerate(rows.items()):
                lines.append(f"| {f'{nbytes >> 20} MiB safetensors, save' if k == 0 else ''} | {name} | "
                             f"{t:.2f} s | {nbytes / t / (1 << 20):.0f} MiB/s | **{base / t:.2f}x** |")
            print("\n".join(lines[-len(rows):]), flush=True)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    table = ["| what | system | time (best of %d) | rate | vs baseline |" % args.repeat, "|---|---|---|---|---|"]
    report = "\n".join(table + lines) + "\n"
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)


if __name__ == "__main__":
    main()
