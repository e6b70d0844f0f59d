"""Write a state file with today's main (PYTHONPATH=/work/main/src): the old spec_json shape."""
import sqlite3
import sys
from pathlib import Path

from tessera.live.spec import parse_request, to_live_job
from tessera.live.store import Store

out = Path(sys.argv[1])
store = Store(out)
reqs = [
    ("j-plain", "q-a", False, "name: plain\ncommand: python train.py --epochs 3\n"),
    ("j-rich", "q-share", True,
     "name: rich\ncommand: [python, 'train.py', '--lr', '0.1']\ngpus: 2\n"
     "flavors: [a100, v100]\npriority: 2.5\nmax_retries: 3\ncheckpoint_dir: /shared/ckpt/rich\n"
     "requires_locality: true\njob_type: ResNet-50 (batch size 64)\nexpected_duration_s: 600\n"
     "max_runtime_s: 7200\nenv: {WANDB_MODE: offline, SEED: '7'}\nexclusive: false\n"
     "memory_gib: 12.5\nglobal_batch: 256\nmodel: resnet50\n"),
    ("j-elastic", "q-a", False,
     "name: el\ncommand: python el.py\ngpus: {min: 1, max: 8, initial: 2}\n"
     "global_batch: {initial: 256, max: 4096}\nmodel: cifar10\n"),
    ("j-3d", "q-a", False,
     "name: big\ncommand: python big.py\ngpus: 8\nglobal_batch: 64\nmodel: llama-7b\n"
     "parallelism: 3d\ntotal_steps: 1000\n"),
]
for i, (jid, q, shares, text) in enumerate(reqs):
    job = to_live_job(parse_request(text), jid, q, 10.0 + i, queue_shares=shares)
    store.add_job(job, 10.0 + i)
store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
store._db.execute("PRAGMA journal_mode=DELETE")
store.close()
for (t,) in sqlite3.connect(out).execute("SELECT spec_json FROM jobs ORDER BY seq"):
    print(t)
