"""Run in a fresh interpreter by test_verl_kept_weights.py: verl's real FSDP2 save/restore on a CPU model in a
one-rank gloo group, with and without sat_ext's KeptWeightsWorker; prints the facts as JSON."""

import json
import os
import sys
import tempfile
from types import SimpleNamespace

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

store = os.path.join(tempfile.mkdtemp(), "store")
dist.init_process_group("gloo", store=dist.FileStore(store, 1), rank=0, world_size=1)
from verl.utils.fsdp_utils import fsdp2_sharded_save_to_cpu  # noqa: E402

from sat_ext.verl.lag.kept_weights import KeptWeightsWorker  # noqa: E402

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
fully_shard(model)
live = {p._local_tensor.untyped_storage().data_ptr() for p in model.parameters()}


def aliased(saved) -> int:
    return sum(t.untyped_storage().data_ptr() in live for t, _spec in saved.values())


verl_saved, _ = fsdp2_sharded_save_to_cpu(model)
worker = object.__new__(KeptWeightsWorker)  # the worker's methods on a model; Ray and the engine are the boundary
worker.config = SimpleNamespace(actor=SimpleNamespace(strategy="fsdp2"))
worker._strategy_handlers = None
worker.actor = SimpleNamespace(engine=SimpleNamespace(module=model))
worker.save_model_to_cpu("v0")
before = worker.weights_fingerprint()
with torch.no_grad():
    for p in model.parameters():
        p.add_(0.5)  # an optimizer step
updated = worker.weights_fingerprint()
worker.restore_model_from_cpu("v0")
try:
    worker.restore_model_from_cpu("v9")
    missing = None
except KeyError as e:
    missing = str(e)
# spill: the kept version in a file, only the structure around it in memory
spill = tempfile.mkdtemp()
worker.save_model_to_cpu("v1", spill_dir=spill)
files = sorted(os.listdir(spill))
in_memory = [t for t, _spec in worker.cpu_saved_models["v1"][0].values() if isinstance(t, torch.Tensor)]
with torch.no_grad():
    for p in model.parameters():
        p.add_(0.25)
worker.restore_model_from_cpu("v1")
spilled_restored = worker.weights_fingerprint()
worker.clear_cpu_model("v1")
facts = {
    "params": len(live),
    "verl_aliased": aliased(verl_saved),
    "kept_aliased": aliased(worker.cpu_saved_models["v0"][0]),
    "before": before,
    "updated": updated,
    "restored": worker.weights_fingerprint(),
    "missing": missing,
    "spill_files": files,
    "spill_tensors_in_memory": len(in_memory),
    "spill_restored": spilled_restored,
    "spill_files_after_clear": os.listdir(spill),
}
json.dump(facts, sys.stdout)
dist.destroy_process_group()
