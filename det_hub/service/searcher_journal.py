"""An experiment's search method, and how the master stores it.

The method is a pure object (:mod:`det_hub.searcher`); the master tells it of each event (a
trial created, a validation, a trial closed, ...) and applies the actions it answers. What is
stored is the method's whole state now and then (``experiments.searcher_state``) and, in
between, the events it was told since (``searcher_events``), a few small rows each: an event
costs about the same however many trials the search has, and telling a restored method the
events stored after its state brings it back exactly where it was.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from det_hub import nonfinite
from det_hub.config import ExperimentConfig
from det_hub.searcher import Action, SearchMethod, build_search_method

if TYPE_CHECKING:
    from det_hub.store import Experiment, Store

#: Events stored after the search method's whole state before it is stored whole again (or
#: as many as the experiment has trials, when that is more): each event costs a small write,
#: the whole state's cost is shared by those events, and a restart tells a method at most
#: this many events again.
SEARCHER_EVENTS_BEFORE_WHOLE = 1000


def tell_searcher(method: SearchMethod, completed_lengths: dict[str, int],
                  event: Mapping[str, Any]) -> list[Action]:
    """Tell a search method of one event, as the master stores it, and answer its actions;
    ``completed_lengths`` (each trial's length done) follows validations. Events: ``initial``
    (the search starts), ``created``, ``validation`` (``metric``, ``length``), ``closed``,
    ``exited_early`` (``reason``) and ``reopen``, each but the first of a ``request_id``.

    Telling a restored method the events stored after its state brings it where it was: a
    method decides from its state and what it is told alone, its random draws included.

    Raises:
        ValueError: An event of another kind.
    """
    kind, request_id = event["event"], event.get("request_id", "")
    if kind == "initial":
        return method.initial_actions()
    if kind == "created":
        return method.on_trial_created(request_id)
    if kind == "validation":
        completed_lengths[request_id] = int(event["length"])
        return method.on_validation(request_id, float(nonfinite.decode(event["metric"])),
                                    int(event["length"]))
    if kind == "closed":
        return method.on_trial_closed(request_id)
    if kind == "exited_early":
        return method.on_trial_exited_early(request_id, str(event["reason"]))
    if kind == "reopen":
        method.reopen(request_id)
        return []
    raise ValueError(f"searcher event {event.get('seq', '?')}: unknown kind {kind!r}")


def restored_searcher(
    row: Experiment, config: ExperimentConfig | Mapping[str, Any] | None,
    state: Mapping[str, Any] | None, events: Iterable[Mapping[str, Any]] = (),
) -> tuple[SearchMethod, dict[str, int], int]:
    """The experiment's search method as it last was: ``state`` (as stored whole, None for a
    new search), then ``events`` (those stored after it, in order) told again (see
    :meth:`Store.load_searcher`). Built from ``config`` (the parsed config, or a continued
    experiment's new config as stored), or the stored one when None.

    Returns:
        The method, each trial's length done, and the number of the last event in it.
    """
    config = row.config if config is None else config
    if isinstance(config, ExperimentConfig):
        method = build_search_method(config.searcher, config.hyperparameters, row.seed)
    else:
        method = build_search_method(
            config["searcher"], config.get("hyperparameters") or {}, row.seed)
    state = state or {}
    if state.get("method"):
        method.restore(state["method"])
    lengths: dict[str, int] = dict(state.get("completed_lengths", {}))
    seq = int(state.get("events_through", 0))
    for event in events:
        tell_searcher(method, lengths, event)
        seq = int(event["seq"])
    return method, lengths, seq


class SearcherJournal:
    """An experiment's search method, each trial's length done as it counts them, and what
    it was told that is not stored yet.

    Attributes:
        method: The search method.
        completed_lengths: Each trial's length done, by request id, as validations said.
    """

    def __init__(self, row: Experiment, config: ExperimentConfig | Mapping[str, Any] | None,
                 state: Mapping[str, Any] | None = None,
                 events: Iterable[Mapping[str, Any]] = ()) -> None:
        """The method as it last was (see :func:`restored_searcher`); ``state`` and
        ``events`` as :meth:`Store.load_searcher` answers them (None and none for a new
        search)."""
        events = list(events)
        self.method, self.completed_lengths, self._seq = restored_searcher(
            row, config, state, events)
        self._untold: list[dict[str, Any]] = []
        self._stored = len(events)  # events stored after the whole state

    def tell(self, event: dict[str, Any]) -> list[Action]:
        """Tell the method of an event (see :func:`tell_searcher`) and keep the event for
        :meth:`save`; answers the method's actions.

        Raises:
            ValueError: The method refuses it (nothing changed, nothing is kept).
        """
        actions = tell_searcher(self.method, self.completed_lengths, event)
        self._untold.append(event)
        return actions

    async def save(self, store: Store, experiment_id: int, trials: int, *,
                   whole: bool = False) -> None:
        """Store what the method was told since the last save, as events; or its whole state
        in their place (``whole``, or once the events stored would reach as many as the
        search has ``trials``, at least :data:`SEARCHER_EVENTS_BEFORE_WHOLE`). Nothing is
        forgotten before it is stored: after a failed write the events wait for the next."""
        untold = len(self._untold)
        stored = self._stored + untold
        if whole or stored >= max(SEARCHER_EVENTS_BEFORE_WHOLE, trials):
            state = {"method": self.method.snapshot(),
                     "completed_lengths": self.completed_lengths,
                     "events_through": self._seq + untold}
            await store.compact_searcher(experiment_id, state, self._seq + untold)
            stored = 0
        elif untold:
            await store.add_searcher_events(experiment_id, self._seq + 1, self._untold)
        self._seq += untold
        self._stored = stored
        del self._untold[:untold]

    def snapshot(self) -> dict[str, Any]:
        """The method's whole state and the lengths done, as stored whole (without the
        number of the last event)."""
        return {"method": self.method.snapshot(), "completed_lengths": dict(self.completed_lengths)}


__all__ = ["SEARCHER_EVENTS_BEFORE_WHOLE", "SearcherJournal", "restored_searcher",
           "tell_searcher"]
