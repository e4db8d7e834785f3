"""Track event categories and which running sessions enable them (upstream's matching rules)."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from perfetto_client._errors import TracingError
from perfetto_client._track_event_writer import event_keys

if TYPE_CHECKING:
    from perfetto_protos.common.track_event_descriptor_pb2 import TrackEventDescriptor

    from perfetto_client._track_event import TrackEventInstance

__all__ = ["Category", "CategoryRegistry", "category_enabled_by", "category_of", "registry"]

_DEFAULT_DISABLED_TAGS = ("slow", "debug")


class Category:
    """A track event category, registered (and advertised to the service) when created.

    Events of a category are recorded only while a session enables it. `enabled` is the one
    attribute the fast paths read: True while any running session enables the category.
    Creating a second Category with a registered name returns an object sharing its state.
    """

    __slots__ = ("description", "dynamic", "enabled", "instances", "keys", "mask", "name", "tags")

    name: str
    description: str
    tags: tuple[str, ...]
    dynamic: bool
    enabled: bool
    instances: tuple[TrackEventInstance, ...]
    mask: int
    keys: dict[str, int]
    """Event name -> event key, for this category."""

    def __init__(
        self,
        name: str,
        description: str = "",
        tags: Sequence[str] = (),
        *,
        dynamic: bool = False,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise TracingError("a category needs a non-empty name")
        self.name = name
        self.description = description
        self.tags = tuple(tags)
        self.dynamic = dynamic
        self.enabled = False
        self.instances = ()
        self.mask = 0
        self.keys = {}
        if not dynamic:
            event_keys.category_iid(name)
        registry.add(self)

    def __repr__(self) -> str:
        return f"Category({self.name!r})"

    def event_key(self, name: str) -> int:
        """The event key of `name` in this category (see `EventKeys.key`)."""
        key = self.keys.get(name)
        if key is None:
            key = self.keys[name] = event_keys.key(self.name, name, dynamic_category=self.dynamic)
        return key


def _matches(pattern: str, name: str, match_type: int) -> bool:
    """Upstream's NameMatchesPattern: 0 exact, 1 prefix pattern ("foo*"), 2 the "*" wildcard."""
    star = pattern.find("*")
    if star < 0:
        return name == pattern
    if star == 0:
        return match_type == 2
    if match_type != 1:
        return False
    return name[:star] == pattern[:star]


def _any(patterns: Iterable[str], name: str, match_type: int) -> bool:
    return any(_matches(p, name, match_type) for p in patterns)


def category_enabled_by(config: Any, name: str, tags: Sequence[str]) -> bool:
    """Whether a session with TrackEventConfig `config` records category `name` with `tags`.

    Upstream's order: for exact names, then prefix patterns, then "*": enabled categories,
    disabled categories, disabled tags ("slow" and "debug" by default), enabled tags;
    a category nothing matches is enabled.
    """
    enabled = list(config.enabled_categories)
    disabled = list(config.disabled_categories)
    disabled_tags = list(config.disabled_tags)
    enabled_tags = list(config.enabled_tags)
    for match_type in (0, 1, 2):
        if _any(enabled, name, match_type):
            return True
        if _any(disabled, name, match_type):
            return False
        if disabled_tags:
            if any(_any(disabled_tags, tag, match_type) for tag in tags):
                return False
        elif not enabled_tags and any(
            _any(_DEFAULT_DISABLED_TAGS, tag, match_type) for tag in tags
        ):
            return False
        if any(_any(enabled_tags, tag, match_type) for tag in tags):
            return True
    return True


class CategoryRegistry:
    """Every category of the process and the running track event session instances."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.by_name: dict[str, list[Category]] = {}
        self.dynamic: dict[str, Category] = {}
        self.instances: tuple[TrackEventInstance, ...] = ()
        """Running instances; replaced, never mutated, so other threads iterate safely."""
        self.generation = 0
        """Bumped whenever the set of running instances changes."""
        self.on_new_category: list[object] = []

    def reset_locks_after_fork(self) -> None:
        """In a forked child: locks another parent thread held would never be released."""
        self._lock = threading.RLock()
        event_keys.reset_locks_after_fork()

    def add(self, category: Category) -> None:
        """Registers a category and computes whether it is enabled now."""
        with self._lock:
            if category.dynamic:
                self.dynamic[category.name] = category
            else:
                first = category.name not in self.by_name
                self.by_name.setdefault(category.name, []).append(category)
                if first:
                    for callback in self.on_new_category:
                        callback()  # type: ignore[operator]
            self._update(category)

    def dynamic_category(self, name: str) -> Category:
        """The dynamic category `name` (created on first use)."""
        category = self.dynamic.get(name)
        if category is None:
            category = Category(name, dynamic=True)
        return category

    def static_category(self, name: str) -> Category:
        """The registered category `name`, or a dynamic category of that name."""
        found = self.by_name.get(name)
        if found:
            return found[0]
        return self.dynamic_category(name)

    def descriptor(self) -> TrackEventDescriptor:
        """The TrackEventDescriptor listing every registered category."""
        # protobuf: 46 ms of CPU, paid when a backend registers the data source.
        from perfetto_protos.common.track_event_descriptor_pb2 import TrackEventDescriptor

        desc = TrackEventDescriptor()
        with self._lock:
            for name, categories in self.by_name.items():
                first = categories[0]
                entry = desc.available_categories.add(name=name)
                if first.description:
                    entry.description = first.description
                entry.tags.extend(first.tags)
        return desc

    def _update(self, category: Category) -> None:
        instances = tuple(
            i for i in self.instances if category_enabled_by(i.config, category.name, category.tags)
        )
        mask = 0
        for instance in instances:
            mask |= 1 << instance.slot
        category.instances = instances
        category.mask = mask
        category.enabled = bool(instances)

    def _update_all(self) -> None:
        for categories in self.by_name.values():
            for category in categories:
                self._update(category)
        for category in self.dynamic.values():
            self._update(category)

    def start_instance(self, instance: TrackEventInstance) -> None:
        """A session started recording track events: enable the categories it wants."""
        with self._lock:
            used = {i.slot for i in self.instances}
            instance.slot = next(s for s in range(len(used) + 1) if s not in used)
            self.instances = (*self.instances, instance)
            self.generation += 1
            self._update_all()

    def replace_instance(self, old: TrackEventInstance, new: TrackEventInstance) -> None:
        """`new` takes over `old`'s slot in one step (startup tracing adopted by a session)."""
        with self._lock:
            remaining = tuple(i for i in self.instances if i is not old)
            used = {i.slot for i in remaining}
            new.slot = next(s for s in range(len(used) + 1) if s not in used)
            self.instances = (*remaining, new)
            self.generation += 1
            self._update_all()

    def stop_instance(self, instance: TrackEventInstance) -> None:
        """A session stopped: its categories go back to what the remaining sessions want."""
        with self._lock:
            if instance in self.instances:
                self.instances = tuple(i for i in self.instances if i is not instance)
                self.generation += 1
                self._update_all()

    def threads_renamed(self) -> None:
        """A Python thread changed its name: every thread re-reads its own."""
        with self._lock:
            self.generation += 1

    def stop_all(self) -> None:
        """Forgets every instance (after fork: the child records nothing of the parent's)."""
        with self._lock:
            self.instances = ()
            self.generation += 1
            self._update_all()

    def is_enabled(self, category: str | Category) -> bool:
        """Whether any running session records `category`."""
        if isinstance(category, Category):
            return category.enabled
        found = self.by_name.get(category)
        if found:
            return found[0].enabled
        with self._lock:
            return any(category_enabled_by(i.config, category, ()) for i in self.instances)


registry = CategoryRegistry()
"""The process-wide category registry."""


def category_of(category: str | Category) -> Category:
    """`category` itself, or the registered (else dynamic) category of that name."""
    if isinstance(category, Category):
        return category
    if not isinstance(category, str):
        raise TracingError(f"a category is a str or a Category, not {type(category).__name__}")
    return registry.static_category(category)
