"""Run on a CPU (pass 17), twice: `PYTHONHASHSEED=1 python prompt_order.py` and `=2`; both
printed a540c0a2652269f6f48163bd421a337fd1ae34349f8cc2f62192cb36d717e8a8: the first 1,024
prompts of +recipe=smol_gpu's stream, as regeneration renders them, are the same in any
process."""

import hashlib

from splitserve.data import PromptStream, load_prompts, prompt_turns
from splitserve.regenerate import compose_run_config

cfg = compose_run_config(["+recipe=smol_gpu"])
stream = PromptStream(load_prompts(cfg.data).train, cfg.data.shuffle_seed)
h = hashlib.sha256()
for g in range(1024):
    h.update(repr(prompt_turns(stream[g])).encode())
print(h.hexdigest())
