"""The `static` backend: the static runtime's families (draft_models.families; runtime.regen).

Regeneration keeps `target.generate_batch` sequences in flight and refills finished ones' slots
from the samples it is handed, in groups of 1/16 of the slots: by default one lazy stream over
every sample the worker still needs (a sample does not depend on its batch, so nothing ties it to
a window, and slots never drain at a window's end: measured on one H200 with windows of 512, each
boundary cost about 2.5 s of empty slots per 5 s of work); `target.produce_window` > 0 cuts the
list into windows instead; every step is one CUDA-graph replay on a GPU and the same code
eagerly on CPU. The draft's target layers are captured by the generating forwards themselves (no
capture pass, no padding). Sampling uses counter-based noise keyed by the sample's
`regeneration_seed`, so a sample is the same in any batch, any process and after a resume (in
fp32; in bf16 a batched prefill or step rounds with its batch's shapes, so after a resume, which
batches only the samples still needed, a near-tie can resolve differently); its draws differ from
the `hf` backend's (torch's generator stream). Greedy answers equal the `hf`
backend's in fp32; in bf16 the two round differently and diverge after a near-tie. Samples are
handed to the worker as they finish (`produce_stream`); one that finishes before the worker needs
it keeps its captured states on the device until sent: about (m + 1) x hidden x 2 bytes per token
in bf16, for m target layers. With target.regenerate=false the dataset's answers are prefilled
`prefill_group` at a time, right-padded in their group; in bf16 a row's captured states round
with its group's shape, so a resumed run, which groups only the samples still needed, can capture
states that differ from the first attempt's in the last bits (in fp32 they agree to rounding).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

from draft_models import SequenceSample

from ...data import Conversation
from ..ahead import ahead
from ..config import regeneration_seed, resolve_dtype
from ..models import load_causal_lm
from ..runtime.engines import static_refusal
from ..runtime.regen import Regenerator, Request
from .base import TargetBackend, TargetSetup, register_backend


@register_backend("static")
class StaticTarget(TargetBackend):
    # measured 1+1 on two H200s (SmolLM2, micro-batch 16, answers up to 256 tokens): one target
    # makes 101.5 samples/s, one trainer takes 81: about half the GPUs each (4+4 of 8)
    target_share = 0.5

    def __init__(self, setup: TargetSetup) -> None:
        super().__init__(setup)
        self.dtype = resolve_dtype(self.cfg.dtype, self.device)
        self.model = load_causal_lm(setup.model_dir, self.device, self.dtype)
        why = static_refusal(self.model)
        if why is not None:
            raise ValueError(f"target.backend=static {why} (use target.backend=hf)")
        self.engine = self.new_engine()

    def new_engine(self, graphs: bool | None = None) -> Regenerator:
        """A fresh engine (cache, and CUDA graphs unless `graphs` is False) for this target's
        settings; `graphs` None: on a GPU when regenerating (teacher forcing only prefills).
        scripts/regen_repeat.py builds one per repeat."""
        if graphs is None and not self.cfg.regenerate:
            graphs = False
        return Regenerator(
            self.model,
            self.layer_ids,
            # teacher forcing fills `prefill_group` rows at a time and needs no more
            slots=self.cfg.generate_batch if self.cfg.regenerate else self.prefill_group,
            # the longest sequence: a prompt of max_prompt_tokens and at least one new token
            max_len=max(self.setup.max_length, self.setup.max_prompt_tokens) + 1,
            eos=self.stop_ids(self.model),
            nucleus=any(s.temperature > 0 and s.top_p < 1 for s in self.cfg.sampling),
            graphs=graphs,
        )

    batch_invariant = True  # counter-based noise per sample: the same sample in any batch

    @property
    def window(self) -> int:
        if not self.cfg.regenerate:
            return 0  # one stream: the dataset's answers, `prefill_group` per forward
        return self.cfg.produce_window  # 0: one stream over the worker's samples

    @property
    def prefill_group(self) -> int:
        """Dataset answers (target.regenerate=false) prefilled by one forward. One forward per
        answer kept the target busy 85 % of the time at ~21 samples/s (three runs on two H200s,
        SmolLM2, ~430 tokens a sample): the trainers waited on it.
        32 is two micro-batches of the GPU recipe (and the cache's rows when teacher forcing)."""
        return min(self.cfg.generate_batch, 32)

    def produce(self, g: int, conversation: Conversation) -> SequenceSample:
        return self.produce_batch([g], [conversation])[0]

    def produce_batch(
        self, gs: list[int], conversations: list[Conversation]
    ) -> list[SequenceSample]:
        out: list[SequenceSample | None] = [None] * len(gs)
        for i, sample in self.produce_stream(gs, conversations):
            out[i] = sample
        return out

    def produce_stream(
        self, gs: list[int], conversations: Iterable[Conversation]
    ) -> Iterator[tuple[int, SequenceSample]]:
        """Each sample as soon as its answer ends (the others keep generating); `conversations`
        is read lazily, as slots free up."""
        if not self.cfg.regenerate:
            yield from self._teacher_forced(conversations)
            return

        def request(item: tuple[int, Conversation]) -> Request:
            g, conversation = item
            prompt = torch.tensor(self.prompt(conversation), dtype=torch.long)
            setting = self.setting(g)
            seed = regeneration_seed(self.setup.seed, g)
            budget = self.budget(prompt.numel())
            return Request(prompt, budget, seed, setting.temperature, setting.top_p)

        # prompts rendered while the steps run (splitserve.target.ahead)
        requests = self._rendered(request, zip(gs, conversations, strict=True))
        for i, d in self.engine.stream(requests):
            yield i, self._sample(d.ids, d.prompt_len, d.aux, d.final)

    def _teacher_forced(
        self, conversations: Iterable[Conversation]
    ) -> Iterator[tuple[int, SequenceSample]]:
        """The dataset's answers, rendered and cut to max_length (`teacher_forced`), prefilled
        `prefill_group` at a time into cache rows 0..k-1 (right-padded to the group's longest;
        each row's states are copied out before the next group overwrites them)."""
        group: list[tuple[int, torch.Tensor, torch.Tensor]] = []
        # rendered while the prefills run and the worker sends (splitserve.target.ahead)
        rendered = self._rendered(self.teacher_forced, conversations)
        for i, (ids, mask) in enumerate(rendered):
            group.append((i, ids, mask))
            if len(group) == self.prefill_group:
                yield from self._prefilled(group)
                group = []
        if group:
            yield from self._prefilled(group)

    def _rendered(self, fn, items: Iterable) -> Iterator:
        """fn over items, `target.render_ahead` ahead in a thread (two prefill groups, or two
        refill groups of a 512-slot regeneration, by default), or inline at 0. The thread uses
        the tokenizer beside the worker's own thread: safe while neither changes its truncation
        or padding settings (nothing here does)."""
        return ahead(fn, items, self.cfg.render_ahead)

    def _prefilled(self, group) -> Iterator[tuple[int, SequenceSample]]:
        with torch.no_grad():
            self.engine.prefill(list(range(len(group))), [ids for _, ids, _ in group])
        for row, (i, ids, mask) in enumerate(group):
            aux, final = self.engine.states(row, ids.numel())
            yield i, SequenceSample(
                input_ids=ids.to(self.device), loss_mask=mask.bool().to(self.device),
                aux_hidden=aux, final_hidden=final,
            )  # fmt: skip

    def _sample(self, ids, prompt_len, aux, final) -> SequenceSample:
        ids, mask = self.with_mask(ids[:prompt_len], ids[prompt_len:])
        n = min(ids.numel(), self.setup.max_length)
        return SequenceSample(
            input_ids=ids[:n].to(self.device), loss_mask=mask[:n].to(self.device),
            aux_hidden=aux[:n], final_hidden=final[:n],
        )  # fmt: skip
