"""Serving side: the lossless speculative decoder, scheduler, evaluation, calibration, SGLang export and launch."""
