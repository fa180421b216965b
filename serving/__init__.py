"""Serving side: SGLang export, speculative decoder, scheduler, launch (issue 4; not yet built)."""
