"""Opening a recorded run for replay (`Store.replay`): the run's checks and verification, and
what surrounds its player (a live fork, the network guard, entropy replay)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Literal
from uuid import UUID

from agentreplay_core._errors import IntegrityError, StoreError
from agentreplay_core._fork import fork_starter
from agentreplay_core._metadata import meta_entropy
from agentreplay_core._model import FORMAT_VERSION
from agentreplay_core._player import Player, check_match_mode

if TYPE_CHECKING:
    from agentreplay_core._store import Store

OnDivergence = Literal["raise", "live"]


def check_secrets_from_env() -> bool:
    """`AGENTREPLAY_CHECK_SECRETS`: on unless it says off (how replays started by the CLI, the
    pytest plugin or `AGENTREPLAY_MODE` are told, with no code changed).

    Raises:
        ValueError: it is set to something else than a yes or a no.
    """
    raw = os.environ.get("AGENTREPLAY_CHECK_SECRETS", "").strip().lower()
    if raw in ("", "1", "true", "yes", "on"):
        return True
    if raw in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"AGENTREPLAY_CHECK_SECRETS={raw!r}: use 1 (check each placeholder's "
                     "secret, the default) or 0 (let placeholders match any text)")


@contextlib.contextmanager
def replaying(
    store: Store,
    run_id: UUID | str,
    *,
    match: str,
    allow_unused: bool,
    verify: bool,
    on_divergence: OnDivergence,
    network_guard: bool | None,
    allow_hosts: Iterable[tuple[str, int]],
    entropy: bool | None,
    secrets: Mapping[str, str] | Iterable[str] | None,
    check_secrets: bool | None,
) -> Iterator[Player]:
    """`Store.replay`, which documents it."""
    store._check_open()
    if check_secrets is None:
        check_secrets = check_secrets_from_env()
    if on_divergence not in ("raise", "live"):
        raise ValueError("on_divergence must be 'raise' or 'live'")
    if on_divergence == "live":
        store._check_writable()  # the fork is a new recording: say so now, not mid-replay
    run = store.get_run(run_id)
    if run.format_version > FORMAT_VERSION:  # its steps may mean what this code cannot know
        raise StoreError(f"run {run.run_id} was recorded by a newer agentreplay (format "
                         f"{run.format_version} > {FORMAT_VERSION}); upgrade agentreplay "
                         "to replay it")
    steps = store.backend.load_steps(run.run_id)
    if verify:
        report = store.verify_steps(run, steps)
        if not report.ok:
            raise IntegrityError(
                f"run {run.run_id} failed verification; refusing to replay it "
                f"(pass verify=False to replay anyway):\n{report}", report=report)
    player = Player(run, steps, match=check_match_mode(match), redactor=store.redaction,
                    secrets=secrets, check_secrets=check_secrets)
    recorded_entropy = meta_entropy(run)
    try:
        with contextlib.ExitStack() as stack:
            if on_divergence == "live":
                player.fork_starter = fork_starter(store, run, stack)
            if network_guard if network_guard is not None else on_divergence == "raise":
                from agentreplay_core._netguard import network_guard as guard

                endpoints: list[tuple[str, int]] = getattr(
                    store.backend, "server_endpoints", list)()
                stack.enter_context(guard(allow=[*endpoints, *allow_hosts], run_id=run.run_id))
            if recorded_entropy if entropy is None else entropy:
                from agentreplay_core._entropy import replay_entropy

                stack.enter_context(replay_entropy(player))
            yield player
    finally:
        # after the entropy patches are gone: no other thread's clock read can reach it
        player.end()
    if player.fork is None and not allow_unused:
        player.check_all_consumed()
