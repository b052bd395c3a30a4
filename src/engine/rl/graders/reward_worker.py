"""The reward worker of rule: and bundle: reward terms (docs/graders.md).

trainer-job starts one per term and keeps it for the whole job:

    python -c SOURCE TARGET FUNCTION

TARGET is a Python file (rule:PATH, bundle:PATH) or DIR#MODULE (bundle:DIR#MODULE); FUNCTION is
called as FUNCTION(data_source, solution_str, ground_truth, extra_info), verl's convention for
reward functions, and may return a number or a dict with a "score".

Protocol, JSON lines over stdin/stdout: first the worker answers {"ready": true}, or
{"loadError": "..."} and exits. Then each request {"items": [{"data_source", "solution_str",
"ground_truth", "extra_info"}, ...]} is answered with one line per item, in order:
{"score": x} when the function returned a finite number, {"error": "..."} when it raised,
{"answer": "..."} (its repr) when it returned anything else. The user's own prints go to stderr,
so they cannot break the protocol.
"""
import importlib
import importlib.util
import json
import math
import os
import sys
import traceback


def _protocol_channel():
    # The real stdout becomes a private channel; fd 1 and sys.stdout point at stderr from here on.
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return channel


def _load(target, function):
    if "#" in target:
        folder, module_name = target.split("#", 1)
        sys.path.insert(0, os.path.abspath(folder))
        module = importlib.import_module(module_name)
    else:
        path = os.path.abspath(target)
        sys.path.insert(0, os.path.dirname(path))
        name = os.path.splitext(os.path.basename(path))[0]
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"{path} is not a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    fn = getattr(module, function, None)
    if not callable(fn):
        raise AttributeError(f"the module has no function {function}()")
    return fn


def _answer(fn, item):
    try:
        result = fn(item.get("data_source"), item.get("solution_str"), item.get("ground_truth"),
                    item.get("extra_info"))
    except Exception as e:  # the user's code: any exception is an unscored call
        return {"error": f"{type(e).__name__}: {e}"[:500]}
    if isinstance(result, dict) and "score" in result:
        result = result["score"]
    if isinstance(result, (bool, int, float)) and math.isfinite(float(result)):
        return {"score": float(result)}
    return {"answer": repr(result)[:200]}


def main():
    channel = _protocol_channel()
    target, function = sys.argv[1], sys.argv[2]
    try:
        fn = _load(target, function)
    except BaseException as e:
        last = traceback.format_exception_only(type(e), e)[-1].strip()
        channel.write(json.dumps({"loadError": last[:1000]}) + "\n")
        return 1
    channel.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        for item in request["items"]:
            channel.write(json.dumps(_answer(fn, item)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
