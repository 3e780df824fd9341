"""sft-bench plans: the plan `search="model"` picks for each model on each target, searched now
(not replayed), and which of them differ from a file written before. What a change that should
not change the search (a refactor) is checked with: write the plans before, compare after."""

from __future__ import annotations

import json

from tqdm import tqdm


def searched_plans(models: list[str], targets: list[str]) -> dict[str, dict]:
    """"target/model" -> the plan's JSON data, searched by the cost model on that target."""
    from ..models import BENCH_SUITE, LARGE_SUITE
    from ..program import prepare
    from ..search.strategy import search_plan
    from ..targets import get_target

    cases = {**BENCH_SUITE, **LARGE_SUITE}
    found = {}
    for name in tqdm([f"{t}/{m}" for t in targets for m in models], desc="sft-bench plans", leave=False):
        target_name, model = name.split("/", 1)
        program, _ = prepare(cases[model].build(), cases[model].inputs())
        found[name] = json.loads(search_plan(program.sft_text, get_target(target_name))[0].to_json())
    return found


def differing(old: dict, new: dict) -> list[str]:
    """The names whose plans differ as Plan records (a key the JSON leaves out is its default),
    or that only one side has."""
    from ..plan import Plan

    def plan(data):
        return None if data is None else Plan.from_json(json.dumps(data))
    return sorted(k for k in {*old, *new} if plan(old.get(k)) != plan(new.get(k)))


def plans(models: list[str], targets: list[str], compare: str | None = None) -> dict:
    found = searched_plans(models, targets)
    for name, data in found.items():
        print(f"{name:<34} {json.dumps(data, sort_keys=True)}")
    result = {"plans": found}
    if compare:
        from ..errors import SftError

        with open(compare) as f:
            try:
                old = json.load(f)
                old = old.get("plans", old)
                if not isinstance(old, dict):
                    raise ValueError("not an object of plans")
            except (ValueError, AttributeError) as err:
                raise SftError(f"not a file `sft-bench plans --json` wrote ({err})", compare) from None
        result["differ"] = differing({k: v for k, v in old.items() if k in found}, found)
        print(f"{len(found)} plan{'s' * (len(found) != 1)}, {len(result['differ'])} differ from {compare}"
              + (f": {', '.join(result['differ'])}" if result["differ"] else ""))
    return result
