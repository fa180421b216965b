"""Serving: the lossless speculative decoder and its scheduler, the evaluation, calibration,
profiling, generation, export (to SGLang's DSpark format) and launch CLIs, and the real-tau probe
the trainer names in its config. Built on draft_models and splitserve.target; never imports the
trainer."""
