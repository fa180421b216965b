"""Training sources: line numbers and columns in errors, linear reading, and any dataset through
the `datasets` library (source kind hf_dataset)."""

import json

import pytest

from splitserve.data import (
    DataConfig,
    LineCounter,
    SourceConfig,
    load_prompts,
    read_gsm8k,
    read_hf_dataset,
    read_jsonl_chat,
    read_sharegpt,
)


def test_line_counter_gives_the_line_of_each_offset():
    text = "a\nbb\n\nccc\nd"
    counter = LineCounter(text)
    offsets = [0, 1, 2, 5, 6, 7, 10, 11]
    assert [counter.line_at(o) for o in offsets] == [text.count("\n", 0, o) + 1 for o in offsets]
    with pytest.raises(ValueError, match="must not decrease"):
        counter.line_at(3)


def test_a_bad_sharegpt_record_deep_in_the_file_is_named_by_its_line(tmp_path):
    """3,000 records, one of them malformed: the error names its line (counted as the reader goes:
    the reader stays linear, which scripts/bench_data.py measures)."""
    good = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}
    lines = ["["] + [json.dumps(good, indent=1) + "," for _ in range(2500)]
    bad_line = sum(part.count("\n") + 1 for part in lines) + 1
    lines += ['{"conversations": 7},'] + [json.dumps(good) + "," for _ in range(499)] + ["]"]
    path = tmp_path / "sharegpt.json"
    path.write_text("\n".join(lines))
    assert len(read_sharegpt(path, limit=2500)) == 2500
    with pytest.raises(ValueError, match=rf"sharegpt.json:{bad_line}: expected an object with a"):
        read_sharegpt(path)


def test_a_malformed_jsonl_line_is_named_by_line_and_column(tmp_path):
    line = '{"question": "' + "a" * 80 + '", "answer": }'
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": "a"}) + "\n" + line + "\n")
    column = line.index("}") + 1  # 97: where the value is missing, within that line
    with pytest.raises(
        ValueError, match=rf"bad.jsonl:2: not valid JSON \(Expecting value at column {column}\)"
    ):
        read_gsm8k(path)


def test_a_conversation_opening_with_an_answer_is_refused_by_line(tmp_path):
    path = tmp_path / "chat.jsonl"
    lines = [
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
        {"messages": [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}]},
        {"messages": [{"role": "assistant", "content": "a"}, {"role": "user", "content": "q"}]},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert len(read_jsonl_chat(path, limit=2)) == 2  # a system prompt before an answer is one
    with pytest.raises(ValueError, match=r"chat.jsonl:3: messages\[0\] is an assistant turn"):
        read_jsonl_chat(path)


def _messages(i):
    return [
        {"role": "user", "content": f"question {i}"},
        {"role": "assistant", "content": f"answer {i}"},
    ]


def test_hf_dataset_reads_local_files_and_saved_datasets(tmp_path):
    import datasets

    rows = [{"messages": _messages(i)} for i in range(5)]
    jsonl = tmp_path / "chat.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows))
    assert read_hf_dataset(SourceConfig(kind="hf_dataset", path=str(jsonl))) == [
        r["messages"] for r in rows
    ]
    streamed = read_hf_dataset(
        SourceConfig(kind="hf_dataset", path=str(jsonl), streaming=True), limit=2
    )
    assert streamed == [rows[0]["messages"], rows[1]["messages"]]

    pairs = datasets.Dataset.from_list(
        [{"q": f"question {i}", "a": f"answer {i}"} for i in range(4)]
    )
    parquet = tmp_path / "pairs.parquet"
    pairs.to_parquet(str(parquet))
    got = read_hf_dataset(
        SourceConfig(kind="hf_dataset", path=str(parquet), prompt_column="q", response_column="a")
    )
    assert got == [_messages(i) for i in range(4)]

    saved = tmp_path / "saved"
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows), "test": datasets.Dataset.from_list(rows[:1])}
    ).save_to_disk(str(saved))
    assert len(read_hf_dataset(SourceConfig(kind="hf_dataset", path=str(saved), split="test"))) == 1
    with pytest.raises(ValueError, match="no split 'valid' \\(it has train, test\\)"):
        read_hf_dataset(SourceConfig(kind="hf_dataset", path=str(saved), split="valid"))

    # through the run's data config, with the held-out tail
    split = load_prompts(
        DataConfig(sources=[SourceConfig(kind="hf_dataset", path=str(jsonl))], eval_prompts=2)
    )
    assert len(split.train) == 3 and split.eval == [rows[3]["messages"], rows[4]["messages"]]


def test_hf_dataset_errors_name_the_source_and_the_row(tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text(
        json.dumps({"messages": _messages(0)})
        + "\n"
        + json.dumps({"messages": [{"role": "robot", "content": "x"}]})
        + "\n"
    )
    with pytest.raises(
        ValueError, match=r"chat.jsonl row 1: messages\[0\] needs role system\|user\|assistant"
    ):
        read_hf_dataset(SourceConfig(kind="hf_dataset", path=str(path)))
    answer_first = tmp_path / "answer_first.jsonl"
    answer_first.write_text(json.dumps({"messages": _messages(0)[::-1]}) + "\n")
    with pytest.raises(
        ValueError, match=r"answer_first.jsonl row 0: messages\[0\] is an assistant turn"
    ):
        read_hf_dataset(SourceConfig(kind="hf_dataset", path=str(answer_first)))
    with pytest.raises(ValueError, match=r"row 0: no column 'conversation' \(columns: messages\)"):
        read_hf_dataset(
            SourceConfig(kind="hf_dataset", path=str(path), messages_column="conversation")
        )
    text = tmp_path / "x.txt"
    text.write_text("x")
    with pytest.raises(ValueError, match="unknown file type"):
        read_hf_dataset(SourceConfig(kind="hf_dataset", path=str(text)))
    with pytest.raises(ValueError, match="needs path"):
        read_hf_dataset(SourceConfig(kind="hf_dataset"))


def test_hf_dataset_column_pairs_and_lazy_read_errors_are_named(tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps({"q": "x", "a": "y"}) + "\n" + "{not json\n")
    with pytest.raises(ValueError, match="set both prompt_column and response_column, or neither"):
        read_hf_dataset(SourceConfig(kind="hf_dataset", path=str(path), prompt_column="q"))
    with pytest.raises(ValueError, match=r"chat.jsonl: reading row \d+ failed: ArrowInvalid"):
        read_hf_dataset(
            SourceConfig(
                kind="hf_dataset",
                path=str(path),
                prompt_column="q",
                response_column="a",
                streaming=True,
            )
        )


def _chat_rows(path, pairs):
    """A jsonl_chat file of (prompt, answer) rows, as regeneration writes one."""
    rows = [
        {"messages": [{"role": "user", "content": p}, {"role": "assistant", "content": a}]}
        for p, a in pairs
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_held_out_prompt_leaves_training_on_every_row(tmp_path):
    """A regenerated file holds one prompt on several rows (one per sampling setting): holding
    out by prompt (the default) takes the last prompts and every row of them out of training;
    `rows`, the rule before it, held out the last rows only and trained on their prompts."""
    pairs = [("p0", "a"), ("p1", "a"), ("p2", "a"), ("p1", "b"), ("p3", "a"), ("p2", "c")]
    src = SourceConfig(kind="jsonl_chat", path=str(_chat_rows(tmp_path / "r.jsonl", pairs)))

    def prompts(convs):
        return [(c[0]["content"], c[1]["content"]) for c in convs]

    split = load_prompts(DataConfig(sources=[src], eval_prompts=2))
    assert prompts(split.eval) == [("p3", "a"), ("p2", "c")]  # the last row of each prompt
    assert prompts(split.train) == [("p0", "a"), ("p1", "a"), ("p1", "b")]  # no p2 row left
    old = load_prompts(DataConfig(sources=[src], eval_prompts=2, hold_out="rows"))
    assert prompts(old.eval) == [("p3", "a"), ("p2", "c")]
    assert ("p2", "a") in prompts(old.train)  # a held-out prompt trained on
    # distinct prompts are counted: three held out here, though the tail's rows repeat p2
    three = load_prompts(DataConfig(sources=[src], eval_prompts=3))
    assert prompts(three.eval) == [("p1", "b"), ("p3", "a"), ("p2", "c")]
    assert prompts(three.train) == [("p0", "a")]
    with pytest.raises(ValueError, match="holding out 4 prompts leaves no row"):
        load_prompts(DataConfig(sources=[src], eval_prompts=4))
    # a held-out prompt leaves every source's training, not only its own
    other = _chat_rows(tmp_path / "o.jsonl", [("p3", "z"), ("r0", "a"), ("q0", "a"), ("q1", "a")])
    both = SourceConfig(kind="jsonl_chat", path=str(other))
    two = load_prompts(DataConfig(sources=[both, src], eval_prompts=1))
    assert prompts(two.eval) == [("q1", "a"), ("p2", "c")]
    assert prompts(two.train) == [("p3", "z"), ("r0", "a"), ("q0", "a")] + [
        ("p0", "a"),
        ("p1", "a"),
        ("p1", "b"),
        ("p3", "a"),
    ]
    two = load_prompts(DataConfig(sources=[src, both], eval_prompts=2))  # p3 held by src
    assert prompts(two.train) == [("p0", "a"), ("p1", "a"), ("p1", "b"), ("r0", "a")]
    assert ("p3", "a") in prompts(two.eval)
    with pytest.raises(ValueError, match="data.eval_prompts=-1 is invalid"):
        load_prompts(DataConfig(sources=[src], eval_prompts=-1))
    with pytest.raises(ValueError, match=r"data.sources\[\].kind='csv' is invalid; allowed: gsm8k"):
        load_prompts(DataConfig(sources=[SourceConfig(kind="csv")]))  # checked before any read
    with pytest.raises(ValueError, match=r"data.hold_out='row' is invalid; allowed: prompts, rows"):
        load_prompts(DataConfig(sources=[src], eval_prompts=2, hold_out="row"))
