"""The model registry, checkpoint deletion and on-demand GC in the master's manager, without
HTTP: real store (SQLite and PostgreSQL), real checkpoint files in shared_fs storage.

Experiments here are rows made in the store (as a finished experiment leaves them), so that
what is tested is the manager's rules: who may do what, what is refused and why, and which
checkpoints go.
"""

from __future__ import annotations

import json
import uuid as uuidlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from det_hub.scopes import MANAGE_SCOPE
from det_hub.service import wire
from det_hub.service.bus import TrialsEnded
from det_hub.service.errors import BadRequest, Conflict, Forbidden, NotFound
from det_hub.service.master import Master, Principal
from det_hub.store import Experiment, Store, Trial


@pytest.fixture
async def alice(store: Store) -> Principal:
    return Principal(user=await store.create_user("alice"))


@pytest.fixture
async def bob(store: Store) -> Principal:
    return Principal(user=await store.create_user("bob"))


@pytest.fixture
async def admin(store: Store) -> Principal:
    return Principal(user=await store.create_user("root", admin=True))


def storage_config(tmp_path: Path, **retention: int) -> dict[str, Any]:
    return {"type": "shared_fs", "host_path": str(tmp_path / "ckpts"), "storage_path": None,
            "save_experiment_best": 0, "save_trial_best": 1, "save_trial_latest": 1,
            **retention}


async def finished_experiment(store: Store, owner: Principal, tmp_path: Path,
                              trial_state: str = "COMPLETED") -> Experiment:
    assert owner.user is not None
    return await store.create_experiment(
        name="exp", owner_id=owner.user.id, config={
            "searcher": {"name": "single", "metric": "validation_loss"},
            "checkpoint_storage": storage_config(tmp_path)},
        original_config="", context=None,
        state="COMPLETED" if trial_state == "COMPLETED" else "ACTIVE",
        searcher_metric="validation_loss", smaller_is_better=True)


async def trial_with_checkpoints(store: Store, exp: Experiment, tmp_path: Path,
                                 losses: dict[int, float | None],
                                 state: str = "COMPLETED") -> tuple[Trial, dict[int, str]]:
    """A trial with a checkpoint (real files) at each step of ``losses``, and a validation
    at those steps whose loss is not None; its latest checkpoint is the last one."""
    trial = await store.create_trial(experiment_id=exp.id, request_id=str(uuidlib.uuid4()),
                                     hparams={}, seed=1, state=state)
    uuids: dict[int, str] = {}
    for steps, loss in losses.items():
        uuid = str(uuidlib.uuid4())
        directory = tmp_path / "ckpts" / uuid
        directory.mkdir(parents=True)
        (directory / "state.json").write_text(json.dumps({"step": steps}))
        await store.add_checkpoint(
            uuid=uuid, trial_id=trial.id, experiment_id=exp.id, allocation_id=None,
            state="COMPLETED", steps_completed=steps, resources={"state.json": 12},
            metadata={}, storage=exp.config["checkpoint_storage"])
        if loss is not None:
            await store.add_metrics(trial.id, "validation", [
                {"steps_completed": steps, "metrics": {"validation_loss": loss}}])
        uuids[steps] = uuid
    trial = await store.update_trial(trial.id, latest_checkpoint=uuids[max(uuids)])
    return trial, uuids


def on_disk(tmp_path: Path) -> set[str]:
    return {p.name for p in (tmp_path / "ckpts").iterdir()}


# -- models ----------------------------------------------------------------------------------



def gc_policy(body: dict[str, Any]) -> wire.CheckpointGCPolicy:
    """A GC policy body, read as the REST API reads it."""
    return wire.parse(wire.CheckpointGCPolicy, body)

async def test_models_are_created_read_by_anyone_and_changed_by_owner_or_admin(
        master: Master, alice: Principal, bob: Principal, admin: Principal) -> None:
    registry = master.registry
    model = await registry.create_model(alice, {
        "name": "mnist cnn", "description": "digits", "labels": ["a", "b", "a"],
        "metadata": {"framework": "torch"}})
    assert model.labels == ["a", "b"]  # duplicates dropped, order kept
    [body] = await registry.model_json([await registry.get_model("mnist cnn")])
    assert body["owner"] == "alice" and body["num_versions"] == 0
    assert body["metadata"] == {"framework": "torch"} and body["archived"] is False

    with pytest.raises(Forbidden, match="only the owner of model 'mnist cnn'"):
        await registry.update_model(bob, "mnist cnn", {"description": "mine now"})
    with pytest.raises(Forbidden):
        await registry.delete_model(bob, "mnist cnn")
    with pytest.raises(Forbidden):
        await registry.set_archived(bob, "mnist cnn", True)
    changed = await registry.update_model(admin, "mnist cnn", {
        "notes": "by admin", "add_metadata": {"data": "mnist"},
        "remove_metadata": ["framework"]})
    assert changed.notes == "by admin" and changed.meta == {"data": "mnist"}
    assert (await registry.get_model("mnist cnn")).description == "digits"

    renamed = await registry.update_model(alice, "mnist cnn", {"name": "mnist-cnn"})
    assert renamed.name == "mnist-cnn"
    with pytest.raises(NotFound, match="model 'mnist cnn' not found"):
        await registry.get_model("mnist cnn")

    rows, total = await registry.list_models(owner="alice")
    assert total == 1 and [m.name for m in rows] == ["mnist-cnn"]
    assert await registry.list_models(owner="nobody") == ([], 0)


async def test_bad_input_is_named_and_taken_names_conflict(
        master: Master, alice: Principal) -> None:
    registry = master.registry
    await registry.create_model(alice, {"name": "m"})
    with pytest.raises(Conflict, match="a model named 'm' already exists"):
        await registry.create_model(alice, {"name": "m", "description": "again"})
    with pytest.raises(BadRequest) as bad:
        await registry.create_model(alice, {"name": "a/b", "labels": "x", "metadata": [],
                                            "colour": "red"})
    assert {d["path"] for d in bad.value.details} == {"name", "labels", "metadata", "colour"}
    with pytest.raises(BadRequest) as missing:
        await registry.create_model(alice, {"description": "no name"})
    assert missing.value.details == [{"path": "name", "message": "required"}]
    for name in ("", " padded", "tab\there", "x" * 256):
        with pytest.raises(BadRequest):
            await registry.create_model(alice, {"name": name})
    await registry.create_model(alice, {"name": "n"})
    with pytest.raises(Conflict, match="'m' already exists"):
        await registry.update_model(alice, "n", {"name": "m"})
    rows, _ = await registry.list_models()
    assert [(m.name, m.description) for m in rows] == [("m", ""), ("n", "")]


async def test_versions_number_up_and_keep_their_checkpoints(
        master: Master, store: Store, alice: Principal, bob: Principal, admin: Principal,
        tmp_path: Path) -> None:
    registry = master.registry
    exp = await finished_experiment(store, alice, tmp_path)
    _, uuids = await trial_with_checkpoints(store, exp, tmp_path, {5: 0.5, 10: 0.2})
    await registry.create_model(alice, {"name": "m"})
    first = await registry.register_version(alice, "m", {
        "checkpoint_uuid": uuids[5], "name": "early", "comment": "first try",
        "metadata": {"acc": 0.7}})
    # Another user may not register into alice's model; an admin may.
    with pytest.raises(Forbidden):
        await registry.register_version(bob, "m", {"checkpoint_uuid": uuids[10]})
    second = await registry.register_version(admin, "m", {"checkpoint_uuid": uuids[10]})
    assert (first.version, second.version) == (1, 2)
    model, latest = await registry.get_version("m")
    assert latest.version == 2 and latest.checkpoint_uuid == uuids[10]
    [body] = await registry.version_json(model, [first])
    assert body["model_name"] == "m" and body["owner"] == "alice"
    assert body["checkpoint"]["uuid"] == uuids[5] and body["checkpoint"]["steps_completed"] == 5
    assert (body["name"], body["comment"], body["metadata"]) == ("early", "first try",
                                                                 {"acc": 0.7})
    [model_body] = await registry.model_json([model])
    assert model_body["num_versions"] == 2

    # The version's own owner (admin) and the model's owner (alice) may change it; bob not.
    with pytest.raises(Forbidden):
        await registry.update_version(bob, "m", 2, {"notes": "x"})
    _, changed = await registry.update_version(alice, "m", 2, {"notes": "promoted"})
    assert changed.notes == "promoted"

    with pytest.raises(NotFound, match="model 'm' has no version 3"):
        await registry.get_version("m", 3)
    with pytest.raises(NotFound, match="model 'nope' not found"):
        await registry.register_version(alice, "nope", {"checkpoint_uuid": uuids[5]})
    missing = str(uuidlib.uuid4())
    with pytest.raises(NotFound, match=f"checkpoint {missing} not found"):
        await registry.register_version(alice, "m", {"checkpoint_uuid": missing})
    with pytest.raises(BadRequest) as bad:
        await registry.register_version(alice, "m", {"checkpoint_uuid": "nope"})
    assert bad.value.details[0]["path"] == "checkpoint_uuid"

    # Archived: readable, not changeable, until unarchived.
    await registry.set_archived(alice, "m", True)
    with pytest.raises(Conflict, match="model 'm' is archived"):
        await registry.register_version(alice, "m", {"checkpoint_uuid": uuids[5]})
    with pytest.raises(Conflict, match="archived"):
        await registry.update_version(alice, "m", 1, {"notes": "x"})
    with pytest.raises(Conflict, match="archived"):
        await registry.update_model(alice, "m", {"notes": "x"})
    assert [v.version for v in (await registry.list_versions("m"))[1]] == [2, 1]
    await registry.set_archived(alice, "m", False)

    await registry.delete_version(alice, "m", 2)
    assert [v.version for v in (await registry.list_versions("m"))[1]] == [1]
    await registry.delete_model(alice, "m")
    with pytest.raises(NotFound):
        await registry.list_versions("m")
    # The checkpoints stay.
    assert [(await store.get_checkpoint(u)).state  # type: ignore[union-attr]
            for u in uuids.values()] == ["COMPLETED", "COMPLETED"]


async def test_registering_a_checkpoint_needs_the_right_to_its_experiment(
        master: Master, store: Store, alice: Principal, bob: Principal, admin: Principal,
        tmp_path: Path) -> None:
    """Registering pins a checkpoint against its owner's deletes: bob may not do that to
    alice's, even in his own model."""
    registry = master.registry
    exp = await finished_experiment(store, alice, tmp_path)
    _, uuids = await trial_with_checkpoints(store, exp, tmp_path, {5: 0.5, 10: 0.2})
    bobs = await registry.create_model(bob, {"name": "bobs"})

    with pytest.raises(Forbidden) as refused:
        await registry.register_version(bob, "bobs", {"checkpoint_uuid": uuids[5]})
    assert str(refused.value) == (
        f"checkpoint {uuids[5]} is of experiment {exp.id}, owned by alice: only its owner, "
        "a user with the manage scope or an admin can register it")
    assert await store.list_model_versions(bobs.id) == []
    assert await master.checkpoints.registered_message(uuids[5]) is None
    # Still alice's to delete.
    assert (await master.checkpoints.delete(alice, uuids[5])).state == "DELETED"

    # Alice may register it in her model; an admin, and bob once the hub lets him manage
    # anyone's work, in bob's.
    await registry.create_model(alice, {"name": "alices"})
    mine = await registry.register_version(alice, "alices", {"checkpoint_uuid": uuids[10]})
    assert (mine.version, mine.checkpoint_uuid, mine.owner_id) == (1, uuids[10], exp.owner_id)
    assert bob.user is not None
    manager = Principal(user=bob.user, scopes=frozenset({MANAGE_SCOPE}))
    versions = [await registry.register_version(who, "bobs", {"checkpoint_uuid": uuids[10]})
                for who in (admin, manager)]
    assert [(v.version, v.checkpoint_uuid) for v in versions] == [(1, uuids[10]),
                                                                   (2, uuids[10])]
    assert [v.version for v in await store.list_model_versions(bobs.id)] == [2, 1]


# -- checkpoint deletion ---------------------------------------------------------------------


async def test_delete_checkpoint_rules(master: Master, store: Store, alice: Principal,
                                       bob: Principal, admin: Principal,
                                       tmp_path: Path) -> None:
    exp = await finished_experiment(store, alice, tmp_path)
    _, uuids = await trial_with_checkpoints(store, exp, tmp_path, {5: 0.5, 10: 0.2, 15: 0.3})
    await master.registry.create_model(alice, {"name": "keeper"})
    await master.registry.register_version(alice, "keeper", {"checkpoint_uuid": uuids[5]})

    with pytest.raises(Forbidden, match=f"only the owner of experiment {exp.id}"):
        await master.checkpoints.delete(bob, uuids[10])
    with pytest.raises(Conflict) as registered:
        await master.checkpoints.delete(alice, uuids[5])
    assert str(registered.value) == (f"checkpoint {uuids[5]} is registered as model 'keeper' "
                                     "version 1; delete that version first")
    missing = str(uuidlib.uuid4())
    with pytest.raises(NotFound, match=f"checkpoint {missing} not found"):
        await master.checkpoints.delete(alice, missing)
    assert on_disk(tmp_path) == set(uuids.values())

    deleted = await master.checkpoints.delete(alice, uuids[10])
    assert deleted.state == "DELETED"
    assert on_disk(tmp_path) == {uuids[5], uuids[15]}
    with pytest.raises(Conflict, match="is DELETED; only a COMPLETED checkpoint"):
        await master.checkpoints.delete(alice, uuids[10])
    # An admin may delete anyone's, the latest of a finished trial too.
    assert (await master.checkpoints.delete(admin, uuids[15])).state == "DELETED"
    # Once its version is gone, the registered one may go too.
    await master.registry.delete_version(alice, "keeper", 1)
    assert (await master.checkpoints.delete(alice, uuids[5])).state == "DELETED"
    assert on_disk(tmp_path) == set()


async def test_the_latest_checkpoint_of_a_trial_that_can_still_run_is_kept(
        master: Master, store: Store, alice: Principal, tmp_path: Path) -> None:
    exp = await finished_experiment(store, alice, tmp_path, trial_state="PAUSED")
    trial, uuids = await trial_with_checkpoints(store, exp, tmp_path, {5: None, 10: None},
                                                state="PAUSED")
    with pytest.raises(Conflict) as latest:
        await master.checkpoints.delete(alice, uuids[10])
    assert str(latest.value) == (f"checkpoint {uuids[10]} is the latest of trial {trial.id}, "
                                 "which is PAUSED and would resume from it; delete it once "
                                 "the trial has ended")
    assert (await master.checkpoints.delete(alice, uuids[5])).state == "DELETED"
    assert on_disk(tmp_path) == {uuids[10]}


# -- GC on demand ----------------------------------------------------------------------------


async def test_gc_dry_run_changes_nothing_then_gc_deletes_and_keeps_the_policy(
        master: Master, store: Store, alice: Principal, bob: Principal,
        tmp_path: Path) -> None:
    exp = await finished_experiment(store, alice, tmp_path)
    # Best (0.1) at 10, latest at 20.
    _, uuids = await trial_with_checkpoints(store, exp, tmp_path,
                                            {5: 0.5, 10: 0.1, 15: 0.3, 20: 0.4})
    await master.registry.create_model(alice, {"name": "m"})
    await master.registry.register_version(alice, "m", {"checkpoint_uuid": uuids[5]})
    policy = {"save_experiment_best": 0, "save_trial_best": 1, "save_trial_latest": 0}

    with pytest.raises(Forbidden):
        await master.checkpoints.collect(bob, exp.id, gc_policy({**policy, "dry_run": True}))
    dry = await master.checkpoints.collect(alice, exp.id,
                                           gc_policy({**policy, "dry_run": True}))
    # Only the best survives the policy; 5 is registered, so only 15 and 20 would go.
    assert dry["dry_run"] is True and dry["policy"] == policy
    assert dry["uuids"] == sorted([uuids[15], uuids[20]])
    assert [c["steps_completed"] for c in dry["checkpoints"]] == [
        {uuids[15]: 15, uuids[20]: 20}[u] for u in dry["uuids"]]
    assert dry["registered"] == [uuids[5]]
    assert on_disk(tmp_path) == set(uuids.values())
    row = await store.get_experiment(exp.id)
    assert row is not None and row.config["checkpoint_storage"]["save_trial_latest"] == 1

    done = await master.checkpoints.collect(alice, exp.id, gc_policy(policy))
    assert done["dry_run"] is False and done["uuids"] == dry["uuids"]
    assert on_disk(tmp_path) == {uuids[5], uuids[10]}
    states = {s: (await store.get_checkpoint(u)).state  # type: ignore[union-attr]
              for s, u in uuids.items()}
    assert states == {5: "COMPLETED", 10: "COMPLETED", 15: "DELETED", 20: "DELETED"}
    row = await store.get_experiment(exp.id)
    assert row is not None
    stored = row.config["checkpoint_storage"]
    assert {k: stored[k] for k in policy} == policy and stored["type"] == "shared_fs"
    # Run again, nothing more goes.
    again = await master.checkpoints.collect(alice, exp.id, gc_policy({}))
    assert again["uuids"] == [] and again["policy"] == policy


async def test_gc_keeps_what_a_running_trial_resumes_from(
        master: Master, store: Store, alice: Principal, tmp_path: Path) -> None:
    exp = await finished_experiment(store, alice, tmp_path, trial_state="ACTIVE")
    _, running = await trial_with_checkpoints(store, exp, tmp_path, {5: None, 10: None},
                                              state="ACTIVE")
    _, ended = await trial_with_checkpoints(store, exp, tmp_path, {5: None, 10: None})
    nothing = {"save_experiment_best": 0, "save_trial_best": 0, "save_trial_latest": 0}
    result = await master.checkpoints.collect(alice, exp.id, gc_policy(nothing))
    assert sorted(result["uuids"]) == sorted([running[5], ended[5], ended[10]])
    assert on_disk(tmp_path) == {running[10]}


async def test_gc_policy_errors_name_the_setting(master: Master, store: Store,
                                                 alice: Principal, tmp_path: Path) -> None:
    with pytest.raises(BadRequest) as bad:
        gc_policy({"save_trial_best": -1, "save_trial_latest": "2", "dry_run": "yes",
                   "keep": 3})
    assert bad.value.message == "invalid checkpoint GC policy"
    assert sorted(d["path"] for d in bad.value.details) == [
        "dry_run", "keep", "save_trial_best", "save_trial_latest"]
    with pytest.raises(NotFound, match="experiment 999 not found"):
        await master.checkpoints.collect(alice, 999, gc_policy({}))


async def test_gc_at_trial_end_skips_registered_checkpoints(
        master: Master, store: Store, alice: Principal, tmp_path: Path) -> None:
    """The trial-end GC is the same pass: it keeps a registered checkpoint as well."""
    exp = await finished_experiment(store, alice, tmp_path)
    # The trial's best (10) and latest (20) are the default policy's to keep.
    trial, uuids = await trial_with_checkpoints(store, exp, tmp_path,
                                                {5: 0.5, 10: 0.1, 15: 0.3, 20: 0.4})
    await master.registry.create_model(alice, {"name": "m"})
    await master.registry.register_version(alice, "m", {"checkpoint_uuid": uuids[5]})
    result = await master.checkpoint_gc.collect(exp, [trial])
    assert result.deleted == [uuids[15]] and result.registered == [uuids[5]]
    assert on_disk(tmp_path) == {uuids[5], uuids[10], uuids[20]}


async def test_gc_at_trial_end_reads_checkpoints_only_where_a_trial_completed_one(
        master: Master, store: Store, alice: Principal, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Trials' end reads the experiment's checkpoints only once one of its trials has a
    latest checkpoint; then the policy applies as before."""
    exp = await finished_experiment(store, alice, tmp_path)
    bare = await store.create_trial(experiment_id=exp.id, request_id=str(uuidlib.uuid4()),
                                    hparams={}, seed=1, state="COMPLETED")
    listed: list[int | None] = []
    list_checkpoints = store.list_checkpoints

    async def counted(**kwargs: Any) -> Any:
        listed.append(kwargs.get("experiment_id"))
        return await list_checkpoints(**kwargs)

    monkeypatch.setattr(store, "list_checkpoints", counted)
    run = SimpleNamespace(row=exp, trials={bare.id: bare})
    await master.bus.publish(TrialsEnded(run, (bare,)))  # type: ignore[arg-type]
    assert listed == []

    trial, uuids = await trial_with_checkpoints(store, exp, tmp_path,
                                                {5: 0.5, 10: 0.1, 15: 0.3, 20: 0.4})
    run.trials[trial.id] = trial
    await master.bus.publish(TrialsEnded(run, (trial,)))  # type: ignore[arg-type]
    assert listed == [exp.id]
    # The default policy keeps the trial's best (10) and latest (20).
    assert on_disk(tmp_path) == {uuids[10], uuids[20]}
