"""Model TTLs: a deployed model not called for its ``deploy_setting.model_ttl_minutes`` is
undeployed, as ml-commons' sync-up job does it (MLSyncUpCron, MLModelCacheHelper.getExpiredModels).

One daemon thread per process sweeps every ``plugins.ml_commons.sync_up_job_interval_in_seconds``
(MLSyncUpCron's cadence, 10 s by default): it waits on an Event with that timeout between
sweeps, so it never spins, and ``stop`` wakes it at once. A change of the setting through
this process wakes it too (``reschedule``): it starts waiting the new interval from then, as
ml-commons cancels its sync-up job and schedules it again. With the setting at 0 (ml-commons
stops its job) the thread only looks at the setting again every ``IDLE_RECHECK_SECONDS``, or
when the setting changes.
Each sweep first writes when this process last called each model (``Registry.flush_access``),
so with several processes on one store a model is undeployed only when no process has
called it for its TTL (at most one interval late, far below a TTL counted in minutes).

Nothing here blocks a request: a sweep takes the store's transaction like any admin write.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..errors import MLStreamError
from .registry import Registry

log = logging.getLogger(__name__)

# With the sweep switched off (interval 0), how often the setting is read again.
IDLE_RECHECK_SECONDS = 60.0


class ModelReaper:
    """Undeploys idle models with a TTL. ``sweep()`` is one pass (a test calls it with the
    registry's clock moved forward); ``start()`` runs passes on a thread until ``stop()``."""

    def __init__(self, registry: Registry, interval_seconds: Callable[[], int]) -> None:
        self._registry = registry
        self._interval = interval_seconds  # the cluster setting, read before every wait
        self._wake = threading.Event()     # set by stop() and reschedule()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def sweep(self) -> list[str]:
        """Undeploy the models idle past their TTL now; their ids."""
        return self._registry.undeploy_idle_models()

    def start(self) -> "ModelReaper":
        self._thread = threading.Thread(target=self._run, name="mlstream-model-ttl", daemon=True)
        self._thread.start()
        return self

    def reschedule(self) -> None:
        """The interval changed: the thread drops the wait it is in and waits the new one."""
        self._wake.set()

    def stop(self) -> None:
        """Wake the thread and let it end; safe twice, and before start."""
        self._stopping = True
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5.0)

    def _run(self) -> None:
        # stop() sets _stopping before the event: whichever side of the clear its set lands
        # on, the loop's test or the next wait sees it
        while not self._stopping:
            interval = self._interval()
            if self._wake.wait(interval if interval > 0 else IDLE_RECHECK_SECONDS):
                # stopped, or rescheduled: the interval is read again after the clear, so no
                # change is lost
                self._wake.clear()
                continue
            if interval <= 0 or self._interval() <= 0:
                continue
            try:
                self.sweep()
            except MLStreamError as error:  # the store unreachable: try again next time
                log.warning("model TTL check failed: %s", error.reason)
            except Exception:  # noqa: BLE001 - a bug must not end the thread
                log.exception("model TTL check failed")
