"""Chat-template rendering, the one place it happens: the prompt a target answers (regeneration,
decoding, evaluation) and whole conversations with an assistant-only loss mask.

Each assistant turn's tokens (its content and the template's end-of-turn tokens) are found by
rendering the conversation up to that turn twice, with and without the turn, and taking the
difference. That needs a prefix-stable template (rendering more turns only appends tokens); a
template that is not is reported instead of silently masking the wrong tokens. A conversation
cut to a token budget (a target's max_length) renders no turn that starts past the cut.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor

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


# Counting below this many conversations (~10 s on one core) stays in this process: each
# spawned worker imports torch and re-imports the launching module (under `python -m
# splitserve.train`, train.py and its imports: ~2 s here).
PARALLEL_FROM = 4000
CHUNK = 500  # conversations a worker renders per task


def answer_token_counts(
    tokenizer, conversations, max_length: int, vocab_size: int, workers: int | None = None
) -> torch.Tensor:
    """Counts [vocab_size] of every token id over the assistant-turn tokens of `conversations`
    as `render_with_loss_mask` renders them (cut to `max_length`); a conversation repeated in
    the list counts as often as it appears, one without an assistant turn counts nothing.
    Rendering runs ~440 conversations a second on one core, so large lists are spread over
    `workers` spawned processes (default: `count_workers()`; one below PARALLEL_FROM
    conversations). A progress bar past a thousand conversations."""
    from collections import Counter

    from tqdm import tqdm

    repeats = Counter(id(c) for c in conversations)
    unique = [
        c
        for c in {id(c): c for c in conversations}.values()
        if any(m.get("role") == "assistant" for m in c)
    ]
    weights = [repeats[id(c)] for c in unique]
    if workers is None:
        workers = count_workers() if len(unique) >= PARALLEL_FROM else 1
    bar = tqdm(
        total=len(unique), desc="counting answer tokens", unit="conv", disable=len(unique) < 1000
    )
    chunks = [(unique[i : i + CHUNK], weights[i : i + CHUNK]) for i in range(0, len(unique), CHUNK)]
    counts = torch.zeros(vocab_size, dtype=torch.long)
    with bar:
        if workers <= 1:
            for convs, weights_ in chunks:
                counts += _count(tokenizer, max_length, vocab_size, convs, weights_)
                bar.update(len(convs))
            return counts
        context = multiprocessing.get_context("spawn")  # the caller may hold CUDA or threads
        with ProcessPoolExecutor(
            workers, mp_context=context, initializer=_counter_init,
            initargs=(tokenizer, max_length, vocab_size),
        ) as pool:  # fmt: skip
            for chunk, part in zip(chunks, pool.map(_count_chunk, chunks), strict=True):
                counts += torch.from_numpy(part)
                bar.update(len(chunk[0]))
    return counts


def count_workers() -> int:
    """Processes for counting: the cores this process may use, shared among the ranks of a
    launcher on this node (LOCAL_WORLD_SIZE under torchrun, each rank counting), at most 16."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    ranks = max(int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1), 1)
    return max(min((cores or 1) // ranks, 16), 1)


_COUNTER: dict = {}  # a counting process's tokenizer and limits (set once per process)


def _counter_init(tokenizer, max_length: int, vocab_size: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle, once
    _COUNTER.update(tokenizer=tokenizer, max_length=max_length, vocab_size=vocab_size)


def _count_chunk(chunk):
    """One task's counts, as a numpy array (a tensor would travel through shared memory)."""
    args = _COUNTER["tokenizer"], _COUNTER["max_length"], _COUNTER["vocab_size"]
    return _count(*args, *chunk).numpy()


def _count(tokenizer, max_length: int, vocab_size: int, conversations, weights) -> torch.Tensor:
    counts = torch.zeros(vocab_size, dtype=torch.long)
    for conv, weight in zip(conversations, weights, strict=True):
        ids, mask = render_with_loss_mask(tokenizer, conv, max_length)
        counts += torch.bincount(ids[mask], minlength=vocab_size) * weight
    return counts
