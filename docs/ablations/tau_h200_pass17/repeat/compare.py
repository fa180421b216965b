"""What wrote compare.json, on the first machine after the two repeats (pass 17): lines compared
whole (prompt, answer text, g, new_tokens, ended), by sample id g."""

import json


def load(path):
    return {json.loads(line)["g"]: line for line in open(path)}


a, b, m = load("/tmp/det/a.jsonl"), load("/tmp/det/b.jsonl"), load("/tmp/tau/regen.jsonl")
ks = sorted(a)


def cmp(x, y):
    common = [k for k in ks if k in x and k in y]
    return {
        "common": len(common),
        "equal": sum(x[k] == y[k] for k in common),
        "first_diff": next((k for k in common if x[k] != y[k]), None),
    }


print(
    json.dumps(
        {
            "a_vs_b": cmp(a, b),
            "a_vs_main": cmp(a, m),
            "b_vs_main": cmp(b, m),
            "a": len(a),
            "b": len(b),
        }
    )
)
