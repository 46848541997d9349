"""Divergence: how often identical temperature-0 requests come back different, by concurrency.

Greedy decoding is deterministic; serving stacks are not. A request's logits depend on the batch it
was computed in, and a last-bit difference flips the argmax wherever two tokens are nearly tied,
after which the two answers never meet again. So the probe sends, for each prompt and each
concurrency level, `requests_per_level` identical requests with `level` of them in flight
(temperature 0 sent explicitly, a fixed seed where the protocol takes one), and counts how the
answers differ: from the reference answer and from the level's own modal answer. Across levels, a
trend test says whether divergence grows with concurrency. For prompts answered as JSON, agreement
on the parsed fields is reported apart from byte equality: assert on meaning, not bytes.

The reference answer is the modal answer of a separate reference sample, `reference_requests`
sent one at a time before the levels, never one of the tested levels' own outputs. Taken from the
lowest level's outputs, it made that level look more deterministic than the others by
construction (its mode agrees with the most of its own outputs), and the trend test then found a
rising trend in 8.6-16.5% of runs where every level had the same output distribution. Against a
fixed reference every level's divergence count is binomial with the same rate under that null,
and the exact trend test keeps its level.

Optional background load (`background_concurrency`) keeps filler requests with other prompts in
flight while each level runs, to raise batch pressure where the probe's own requests are too few
to matter; they are stored with phase=background and left out of the metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from prober.core import stats
from prober.core.declarations import Chart, MetricFamily, NotableSample
from prober.core.findings import STRUCTURED_OUTPUT_RATES, structured_output_counts
from prober.core.records import ChatRequest, Metric, SampleRow
from prober.probes.base import ERROR_RATE, MetricCollector, Probe, ProbeContext, ProbeParams
from prober.probes.prompts import filler_words, nonce


class DivergencePrompt(BaseModel):
    """One prompt of the probe. With `json_schema` set it is answered as JSON constrained to that
    schema (response_format on OpenAI, output_config on Anthropic) and compared field by field."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    text: str = Field(min_length=1)
    system: str | None = None
    json_schema: dict[str, Any] | None = None


# Open-ended prompts leave the model many nearly tied choices (a word, a name, what comes next),
# so they show divergence readily; the structured one checks that the meaning holds when bytes move.
# Its fields are all bounded (enums, a boolean), so the answer always fits in max_tokens, using only
# keywords both hosted APIs' structured outputs accept (they reject length and range limits).
SHIPPED_PROMPTS: tuple[DivergencePrompt, ...] = (
    DivergencePrompt(name="story", text="Write a short story about a lighthouse keeper who finds a message "
                                        "in a bottle."),
    DivergencePrompt(name="list", text="List ten ideas for a weekend project, one per line, each with a "
                                       "sentence on why it is fun."),
    DivergencePrompt(name="explain", text="Explain to a curious twelve-year-old how a refrigerator keeps "
                                          "food cold."),
    DivergencePrompt(
        name="review_json",
        text=("Read this product review and describe it: its sentiment, a rating from 1 to 5, whether the "
              "reviewer would recommend the product, what they praise most and what they complain about "
              "most.\n\nReview: \"I bought this "
              "blender for smoothies. It crushes ice in seconds and the jug is easy to clean, but it is very "
              "loud and the lid cracked after two months. Customer service replaced the lid quickly.\""),
        json_schema={
            "type": "object",
            "properties": {
                "sentiment": {"type": "string", "enum": ["positive", "negative", "mixed"]},
                "rating": {"type": "integer", "enum": [1, 2, 3, 4, 5]},
                "would_recommend": {"type": "boolean"},
                "praise": {"type": "string", "enum": ["ice crushing", "easy cleaning", "customer service", "none"]},
                "complaint": {"type": "string", "enum": ["noise", "durability", "price", "none"]},
            },
            "required": ["sentiment", "rating", "would_recommend", "praise", "complaint"],
            "additionalProperties": False,
        },
    ),
)


class DivergenceParams(ProbeParams):
    levels: list[int] = Field(default_factory=lambda: [1, 4, 16, 64])
    requests_per_level: int = Field(32, ge=2, description="identical requests per prompt and level; a level "
                                    "above it sends `level` requests, so that many really are in flight")
    max_tokens: int = Field(256, ge=1)
    temperature: float = 0.0
    seed: int | None = Field(1234, description="sent where the protocol takes a seed (OpenAI)")
    logprobs: bool = Field(False, description="ask for logprobs (OpenAI) for exact token positions; "
                           "without them tokens come from the stream when it sends one token per chunk")
    prompts: list[str] | None = Field(None, description="shipped prompts to use, by name; default all")
    custom_prompts: list[DivergencePrompt] = Field(default_factory=list)
    background_concurrency: int = Field(0, ge=0, description="filler requests kept in flight during each "
                                        "level; 0: none")
    reference_requests: int = Field(8, ge=1, description="requests per prompt sent one at a time before the "
                                    "levels; their modal output is the reference every level is compared with")

    @field_validator("levels")
    @classmethod
    def _positive_sorted(cls, levels: list[int]) -> list[int]:
        if len(levels) < 1 or any(level < 1 for level in levels):
            raise ValueError("levels must be a non-empty list of positive integers")
        return sorted(set(levels))

    @field_validator("prompts")
    @classmethod
    def _known(cls, names: list[str] | None) -> list[str] | None:
        known = [p.name for p in SHIPPED_PROMPTS]
        for name in names or []:
            if name not in known:
                raise ValueError(f"unknown prompt {name!r} (shipped: {', '.join(known)})")
        return names

    @model_validator(mode="after")
    def _unique_names(self) -> DivergenceParams:
        names = [p.name for p in self.selected_prompts()]
        if not names:
            raise ValueError("no prompts: select shipped prompts or add custom_prompts")
        duplicated = sorted(name for name, count in Counter(names).items() if count > 1)
        if duplicated:
            raise ValueError(f"prompt name used twice: {duplicated[0]}")
        return self

    def selected_prompts(self) -> list[DivergencePrompt]:
        shipped = [p for p in SHIPPED_PROMPTS if self.prompts is None or p.name in self.prompts]
        return shipped + list(self.custom_prompts)

    def requests_at(self, level: int) -> int:
        return max(self.requests_per_level, level)


def _same_request(prompt: DivergencePrompt, params: DivergenceParams, protocol: str) -> Callable[[int], ChatRequest]:
    """closed_loop's make_request for one prompt: every request of it is the same."""
    return lambda _index: build_request(prompt, params, protocol)


def build_request(prompt: DivergencePrompt, params: DivergenceParams, protocol: str) -> ChatRequest:
    sampling: dict[str, Any] = {"temperature": params.temperature}
    # Chat completions only: neither Anthropic's API nor OpenAI's Responses API takes a seed or
    # penalties (the Responses API's logprobs come through `include`, which this probe does not read).
    if protocol == "openai":
        # The no-op penalties too, so that no server-side default can leak in.
        sampling.update(frequency_penalty=0.0, presence_penalty=0.0)
        if params.seed is not None:
            sampling["seed"] = params.seed
        if params.logprobs:
            sampling["logprobs"] = True
    json_schema = None
    if prompt.json_schema is not None:
        json_schema = {"name": prompt.name, "schema": prompt.json_schema, "strict": True}
    return ChatRequest(messages=[{"role": "user", "content": prompt.text}], system=prompt.system,
                       max_tokens=params.max_tokens, stream=True, sampling=sampling, json_schema=json_schema)


def background_request(i: int, params: DivergenceParams) -> ChatRequest:
    """A filler request unlike the measured ones and unlike each other (no shared cache prefix)."""
    return ChatRequest(messages=[{"role": "user", "content": f"[{nonce()}] {filler_words(48, offset=i)}\n\n"
                                                             f"Continue this text for a while."}],
                       max_tokens=params.max_tokens, stream=True, sampling={"temperature": params.temperature})


@contextlib.asynccontextmanager
async def background_load(ctx: ProbeContext, params: DivergenceParams, level: int) -> AsyncIterator[None]:
    """Keep `background_concurrency` filler requests in flight until the block ends; each worker
    then finishes the request it has in flight, so every one of them is stored."""
    if not params.background_concurrency:
        yield
        return
    stop = asyncio.Event()
    counter = itertools.count()
    labels = {"concurrency": level, "phase": "background"}

    async def worker() -> None:
        while not stop.is_set():
            await ctx.send(background_request(next(counter), params), case="background", labels=labels)

    workers = [asyncio.create_task(worker()) for _ in range(params.background_concurrency)]
    try:
        yield
    except BaseException:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise
    stop.set()
    await asyncio.gather(*workers)


class DivergenceProbe(Probe[DivergenceParams]):
    name = "divergence"
    timing = "overlap"      # a request's batch is the requests in flight with it
    # 2: divergence is measured against a separate reference sample, not the lowest level's mode.
    version = 2
    metric_names = frozenset({
        "error_rate", "unique_outputs", "modal_share", "divergence_rate_vs_modal", "system_fingerprints",
        "divergence_rate", "first_divergence_char_min", "first_divergence_char_median",
        "first_divergence_token_min", "first_divergence_token_median", "json_valid_rate",
        "semantic_divergence_rate", "field_agreement", "divergence_trend_p_value", "divergence_trend_z",
        "divergence_exact_p_value", "system_fingerprint_requests", "rejected_param_requests",
        "reference_modal_share", *STRUCTURED_OUTPUT_RATES})
    label_params: ClassVar[dict[str, str]] = {"levels": "concurrency"}
    Params = DivergenceParams
    # modal_share and divergence_rate_vs_modal mirror divergence_rate, which pages for them: their
    # moves are notices.
    metric_families = (
        ERROR_RATE,
        MetricFamily("divergence_rate", "share", bad_direction=1),
        MetricFamily("json_valid_rate", "share", bad_direction=-1),
        # The answer ignored the requested structure, or broke its schema (prober/targets/structured.py).
        *(MetricFamily(name, "share", bad_direction=1) for name in STRUCTURED_OUTPUT_RATES),
    )
    pooled_labels = frozenset({"prompt"})

    async def run(self, ctx: ProbeContext, params: DivergenceParams) -> None:
        prompts = params.selected_prompts()
        for prompt in prompts:
            await ctx.closed_loop(
                concurrency=1, count=params.reference_requests,
                make_request=_same_request(prompt, params, ctx.target.protocol),
                case=prompt.name, labels={"concurrency": 1, "prompt": prompt.name, "phase": "reference"},
                title=f"divergence {prompt.name} reference")
        for level in params.levels:
            async with background_load(ctx, params, level):
                for prompt in prompts:
                    await ctx.closed_loop(
                        concurrency=level, count=params.requests_at(level),
                        make_request=_same_request(prompt, params, ctx.target.protocol),
                        case=prompt.name, labels={"concurrency": level, "prompt": prompt.name, "phase": "measure"},
                        title=f"divergence {prompt.name} c={level}")

    def summarize(self, samples: Sequence[SampleRow], params: DivergenceParams, *,
                  run_id: str, target: str) -> list[Metric]:
        final = [r for r in samples if r.get("probe") == self.name and r.get("final", True)]
        measured = [r for r in final if (r.get("labels") or {}).get("phase") == "measure"]
        by_prompt: dict[str, dict[int, list[SampleRow]]] = defaultdict(lambda: defaultdict(list))
        for row in measured:
            labels = row["labels"]
            by_prompt[str(labels["prompt"])][int(labels["concurrency"])].append(row)
        reference_rows: dict[str, list[SampleRow]] = defaultdict(list)
        for row in final:
            if row["labels"].get("phase") == "reference" and not row.get("error_type"):
                reference_rows[str(row["labels"]["prompt"])].append(row)
        specs = {p.name: p for p in params.selected_prompts()}

        collected = MetricCollector(run_id=run_id, target=target, probe=self.name)
        metrics, add, add_share = collected.metrics, collected.add, collected.share

        for prompt_name in sorted(by_prompt):
            levels = by_prompt[prompt_name]
            spec = specs.get(prompt_name)
            references = reference_rows[prompt_name]
            reference = _modal_row(references)
            if reference is not None:
                add_share("reference_modal_share", Counter(r["output_sha256"] for r in references).most_common(1)[0][1],
                          len(references), {"prompt": prompt_name})
            diverged_by_level: dict[int, tuple[int, int]] = {}
            for level in sorted(levels):
                rows = levels[level]
                labels = {"prompt": prompt_name, "concurrency": level}
                ok = [r for r in rows if not r.get("error_type")]
                add_share("error_rate", len(rows) - len(ok), len(rows), labels)
                if not ok:
                    continue
                counts = Counter(r["output_sha256"] for r in ok)
                modal_count = counts.most_common(1)[0][1]
                add("unique_outputs", len(counts), labels, len(ok), "outputs")
                add_share("modal_share", modal_count, len(ok), labels)
                add_share("divergence_rate_vs_modal", len(ok) - modal_count, len(ok), labels)
                fingerprints = {r["system_fingerprint"] for r in ok if r.get("system_fingerprint")}
                add("system_fingerprints", len(fingerprints), labels, len(ok), "fingerprints")
                if reference is not None:
                    differing = [r for r in ok if r["output_sha256"] != reference["output_sha256"]]
                    diverged_by_level[level] = (len(differing), len(ok))
                    add_share("divergence_rate", len(differing), len(ok), labels)
                    chars, tokens = first_divergence_positions(differing, reference)
                    add("first_divergence_char_min", min(chars, default=None), labels, len(chars), "chars")
                    collected.percentile("first_divergence_char_median", chars, 50, labels, "chars")
                    if tokens:
                        add("first_divergence_token_min", min(tokens), labels, len(tokens), "tokens")
                        collected.percentile("first_divergence_token_median", tokens, 50, labels, "tokens")
                if spec is not None and spec.json_schema is not None:
                    for name, hits, extra_labels in json_agreement(ok, _modal_json(references)):
                        add_share(name, hits, len(ok), {**labels, **extra_labels})
                    for name, hits in structured_output_counts([r.get("findings") for r in ok]):
                        add_share(name, hits, len(ok), labels)

            if len(diverged_by_level) >= 2:
                ordered = sorted(diverged_by_level)
                trend = stats.cochran_armitage([diverged_by_level[lv][0] for lv in ordered],
                                               [diverged_by_level[lv][1] for lv in ordered],
                                               alternative="increasing")
                n_total = sum(n for _, n in diverged_by_level.values())
                add("divergence_trend_p_value", trend.p_value, {"prompt": prompt_name}, n_total, "p")
                add("divergence_trend_z", trend.z, {"prompt": prompt_name}, n_total, "z")
                (low_x, low_n), (high_x, high_n) = diverged_by_level[ordered[0]], diverged_by_level[ordered[-1]]
                add("divergence_exact_p_value", stats.fisher_exact(low_x, low_n, high_x, high_n, "greater"),
                    {"prompt": prompt_name, "versus": f"{ordered[0]}-{ordered[-1]}"}, low_n + high_n, "p")

        # Fingerprint values go in labels of their own series, so the per-level count series keeps
        # one identity across runs while a new backend still shows up by name.
        fingerprint_requests = Counter(r["system_fingerprint"] for r in measured
                                       if not r.get("error_type") and r.get("system_fingerprint"))
        for fingerprint, count in sorted(fingerprint_requests.items()):
            add("system_fingerprint_requests", count, {"fingerprint": fingerprint}, len(measured), "requests")
        rejected = Counter(name for r in measured for name in (r.get("rejected_params") or []))
        for param, count in sorted(rejected.items()):
            add("rejected_param_requests", count, {"param": param}, len(measured), "requests")
        return metrics

    def charts(self, latest: Sequence[dict[str, Any]]) -> list[Chart]:
        return [Chart("versus", "Divergence rate against concurrency (vs the reference sample's modal output, "
                      "Wilson 95%)", "divergence rate", ("divergence_rate",), x="concurrency"),
                Chart("versus", "Divergence from each level's own modal output", "divergence rate",
                      ("divergence_rate_vs_modal",), x="concurrency")]

    def examples(self, samples: Sequence[SampleRow]) -> list[NotableSample]:
        """Outputs unlike the most common output of their case (the same prompt at any concurrency),
        each distinct output once."""
        by_case: dict[str, list[SampleRow]] = defaultdict(list)
        for row in samples:
            by_case[row["case"]].append(row)
        found, seen = [], set()
        for case_rows in by_case.values():
            modal = Counter(r["output_sha256"] for r in case_rows).most_common(1)[0][0]
            for row in case_rows:
                if row["output_sha256"] != modal and row["output_sha256"] not in seen:
                    seen.add(row["output_sha256"])
                    found.append(NotableSample(row, "differs from the most common output of its prompt",
                                               row.get("output_text")))
        return found


def first_divergence_positions(differing: list[SampleRow], reference: SampleRow
                               ) -> tuple[list[int], list[int]]:
    """Where each differing output parts from the reference: in characters (of the stored text),
    and in tokens for the outputs whose tokens are known, when the reference's are too."""
    reference_text = reference.get("output_text") or ""
    chars = [common_prefix_length(r.get("output_text") or "", reference_text) for r in differing]
    reference_tokens = output_token_pieces(reference)
    tokens = []
    if reference_tokens is not None:
        for row in differing:
            pieces = output_token_pieces(row)
            if pieces is not None:
                tokens.append(common_prefix_length(pieces, reference_tokens))
    return chars, tokens


def json_agreement(ok: list[SampleRow], reference: Any) -> list[tuple[str, int, dict[str, Any]]]:
    """(metric name, outputs that count, extra labels) for a JSON prompt: outputs that parse, that
    mean the same as the reference (its parsed value), and that agree with it field by field."""
    parsed = [parse_json(r.get("output_text")) for r in ok]
    shares: list[tuple[str, int, dict[str, Any]]] = [
        ("json_valid_rate", sum(1 for value in parsed if value is not _INVALID), {})]
    if reference is _INVALID:
        return shares
    shares.append(("semantic_divergence_rate", sum(1 for value in parsed if value != reference), {}))
    if isinstance(reference, dict):
        for field, expected in reference.items():
            agree = sum(1 for value in parsed
                        if isinstance(value, dict) and field in value and value[field] == expected)
            shares.append(("field_agreement", agree, {"field": field}))
    return shares


_INVALID = object()


def parse_json(text: str | None) -> Any:
    """The parsed JSON value of an output, or _INVALID."""
    try:
        return json.loads(text or "")
    except ValueError:
        return _INVALID


def _modal_row(rows: list[SampleRow]) -> SampleRow | None:
    """The first row carrying the most common output (ties go to the output seen first)."""
    if not rows:
        return None
    counts = Counter(r["output_sha256"] for r in rows)
    top = max(counts.values())
    return next(r for r in rows if counts[r["output_sha256"]] == top)


def _modal_json(rows: list[SampleRow]) -> Any:
    """The most common parsed JSON value among the rows whose output parses; _INVALID if none."""
    canonical: Counter[str] = Counter()
    values: dict[str, Any] = {}
    for row in rows:
        value = parse_json(row.get("output_text"))
        if value is not _INVALID:
            key = json.dumps(value, sort_keys=True)
            canonical[key] += 1
            values.setdefault(key, value)
    if not canonical:
        return _INVALID
    return values[canonical.most_common(1)[0][0]]


def common_prefix_length(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items two sequences share: the position where they part."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def _reported_output_tokens(usage: dict[str, Any] | None) -> int | None:
    for key in ("output_tokens", "completion_tokens"):
        if isinstance(count := (usage or {}).get(key), int):
            return count
    return None


def output_token_pieces(row: SampleRow) -> list[str] | None:
    """The output split into its tokens: from logprobs when the endpoint returned them, else from
    the stream's chunks when it sent exactly one token per chunk (the chunk count equals the
    reported output tokens); None when neither tells."""
    logprobs = (row.get("extra") or {}).get("logprobs")
    if isinstance(logprobs, list) and logprobs and all(
            isinstance(item, dict) and isinstance(item.get("token"), str) for item in logprobs):
        return [item["token"] for item in logprobs]
    chunks = row.get("chunk_chars") or []
    text = row.get("output_text") or ""
    if (not chunks or row.get("output_truncated") or sum(chunks) != len(text)
            or _reported_output_tokens(row.get("usage")) != len(chunks)):
        return None
    offsets = list(itertools.accumulate(chunks, initial=0))
    return [text[start:end] for start, end in itertools.pairwise(offsets)]
