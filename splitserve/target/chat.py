"""Chat-template rendering, the one place it happens: the prompt a target answers (regeneration,
decoding, evaluation) and whole conversations with an assistant-only loss mask.

Each assistant turn's tokens (its content and the template's end-of-turn tokens) are found by
rendering the conversation up to that turn twice, with and without the turn, and taking the
difference. That needs a prefix-stable template (rendering more turns only appends tokens); a
template that is not is reported instead of silently masking the wrong tokens. A conversation
cut to a token budget (a target's max_length) renders no turn that starts past the cut.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _ids(tokenizer, messages, generation_prompt: bool) -> list[int]:
    out = tokenizer.apply_chat_template(
        list(messages), add_generation_prompt=generation_prompt, tokenize=True, return_dict=True
    )
    return list(out["input_ids"])


def prompt_ids(tokenizer, messages: Sequence[dict], max_tokens: int | None = None) -> list[int]:
    """The token ids of `messages` followed by the assistant's generation prompt: what the target
    answers. `max_tokens` keeps only the last that many (the end of a long prompt matters most)."""
    ids = _ids(tokenizer, messages, True)
    return ids[-max_tokens:] if max_tokens else ids


def render_with_loss_mask(
    tokenizer, messages: Sequence[dict], max_tokens: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """messages: [{"role": "system"|"user"|"assistant", "content": str}, ...] ->
    (input_ids [L], loss_mask [L] bool, True exactly on assistant-turn tokens).

    `max_tokens`: the first that many of those, rendering no turn that starts past them. Each
    render covers the conversation up to a turn, so an uncut render of n turns costs O(n^2) in
    the turns' length; a ShareGPT conversation cut to 1,024 tokens rendered in half the time
    (scripts/bench_render.py --source sharegpt). Each render is checked to extend the one before
    it; the cut result is then the uncut one's first max_tokens (tests/test_target_side.py).
    Only the renders before the cut are checked: a template that breaks prefix-stability past
    it goes unnoticed in that conversation (what is returned is still the render of its turns
    up to the cut, masked right for that render) and is refused by the first conversation
    whose kept tokens reach the break."""
    if not messages or not any(m.get("role") == "assistant" for m in messages):
        raise ValueError("a training conversation needs at least one assistant turn")
    if messages[0].get("role") == "assistant":  # nothing renders before it but the template's
        # own opening (e.g. SmolLM2's default system prompt), which would land in the loss
        raise ValueError(
            "message 0 is an assistant turn: a training conversation starts with a system or "
            "user message (there is no prompt for the answer)"
        )
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens={max_tokens}: keep at least one token")
    limit = max_tokens if max_tokens is not None else float("inf")

    def extends(ids: list[int], prefix: list[int], upto: int) -> list[int]:
        if ids[: len(prefix)] != prefix:
            raise ValueError(
                "the tokenizer's chat template is not prefix-stable: rendering the conversation "
                f"up to message {upto} changed the tokens of the messages before it, so the "
                "assistant tokens for the loss mask cannot be located"
            )
        return ids

    ids, spans, rendered = None, [], []  # rendered: the longest render so far
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        before = extends(_ids(tokenizer, messages[:i], True) if i else [], rendered, i)
        if len(before) >= limit:  # this turn starts past the cut
            ids = before
            break
        # a conversation's last turn, uncut, is the whole render (two renders, not three)
        rendered = extends(_ids(tokenizer, messages[: i + 1], False), before, i)
        spans.append((len(before), len(rendered)))
        if len(rendered) >= limit:
            ids = rendered
            break
    if ids is None:  # no cut reached: the turns after the last answer too (a closing user turn)
        ids = rendered
        if messages[-1].get("role") != "assistant":
            ids = extends(_ids(tokenizer, messages, False), rendered, len(messages) - 1)
    n = min(len(ids), limit)
    mask = torch.zeros(n, dtype=torch.bool)
    for a, b in spans:
        mask[a : min(b, n)] = True
    return torch.tensor(ids[:n], dtype=torch.long), mask
