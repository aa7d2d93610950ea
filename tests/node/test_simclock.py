"""The accelerated clock (``openmemory-node start --clock-file``): the arithmetic, the file
moved while the daemon runs, bad files, and a real daemon on a simulated world's time."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pytest

from openmemory_node.client import ApiError
from openmemory_node.simclock import ClockFileError, FileClock, read_clock_file, write_clock_file

from .harness import Cluster, cli, wait_until

WORLD = datetime(2026, 4, 1, 23, 59, 59, tzinfo=timezone.utc).timestamp()
DAY = 86400


class Wall:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_world_time_runs_at_its_rate_and_follows_the_file(tmp_path):
    wall = Wall(1_000_000.0)
    path = write_clock_file(tmp_path / "clock.json", WORLD, 60.0, wall=wall.now)
    clock = FileClock(path, wall=wall)
    assert clock() == WORLD
    wall.now += 10  # ten wall seconds are ten world minutes
    assert clock() == pytest.approx(WORLD + 600)
    write_clock_file(path, WORLD + DAY, 60.0, wall=wall.now)  # the simulation moves the world
    assert clock() == pytest.approx(WORLD + DAY)
    write_clock_file(path, WORLD, 0.0, wall=wall.now)  # a world behind what was shown: held there
    wall.now += 100
    assert clock() == pytest.approx(WORLD + DAY)
    write_clock_file(path, WORLD + 2 * DAY, 1.0, wall=wall.now)
    assert clock() == pytest.approx(WORLD + 2 * DAY)


def test_a_bad_file_is_refused_at_start_and_ignored_later(tmp_path):
    path = tmp_path / "clock.json"
    with pytest.raises(ClockFileError, match="no clock file"):
        FileClock(path)
    for body, message in (("nope", "not a clock file"), ("[1]", "not a JSON object"),
                          ('{"world": 1, "wall": 2, "speed": 3}', "unknown keys"),
                          ('{"world": "x", "wall": 2}', "'world' must be a finite number"),
                          ('{"world": 1, "wall": 2, "rate": -1}', "rate must be"),
                          ('{"world": NaN, "wall": 2}', "finite")):
        path.write_text(body)
        with pytest.raises(ClockFileError, match=message):
            read_clock_file(path)
    wall = Wall(5_000.0)
    write_clock_file(path, WORLD, 2.0, wall=wall.now)
    clock = FileClock(path, wall=wall)
    path.write_text('{"world": "half written')  # the last good description stays
    wall.now += 1
    assert clock() == pytest.approx(WORLD + 2)
    write_clock_file(path, WORLD + DAY, 2.0, wall=wall.now)  # a good one again is taken
    assert clock() == pytest.approx(WORLD + DAY)


def test_start_refuses_a_missing_clock_file(tmp_path):
    home = tmp_path / "n"
    cli(home, "init", "--listen", "/ip4/127.0.0.1/tcp/0", "--api", "127.0.0.1:0")
    proc = cli(home, "start", "--clock-file", str(tmp_path / "absent.json"), check=False)
    assert proc.returncode == 2
    assert "--clock-file" in proc.stderr and "no clock file" in proc.stderr


def test_a_daemon_on_the_world_clock(tmp_path):
    """Record times, the clock-skew check and the sync interval follow the clock file."""
    cluster = Cluster(tmp_path / "nodes")
    clock = tmp_path / "clock.json"
    write_clock_file(clock, WORLD, 3600.0)  # a wall second is a world hour
    try:
        a, b = cluster.node("a"), cluster.node("b")
        a.init()
        b.init([a.multiaddr])
        for node in (a, b):
            node.configure("[sync]\ninterval = 7200.0")  # two hours of the world: about 2 s here
            node.start_args = ["--clock-file", str(clock)]
            node.start(wait=False)
        a.wait_ready()
        b.wait_ready()
        # signed at the world's time
        rec = a.publish("`make test` failed: \"No rule to make target 'test'.\".", kind="error")
        assert WORLD <= rec["created"] <= WORLD + 3 * DAY
        # a record dated a week ahead of the world is from the future: refused ...
        ahead = int(WORLD + 7 * DAY)
        with pytest.raises(ApiError) as info:
            a.post("/v1/lessons", {"text": "`cargo build` failed: \"could not find 'Cargo.toml'\".", "kind": "error",
                                   "created": ahead})
        assert info.value.status == 422 and info.value.code == "clock-skew"
        # ... until the world has moved on
        write_clock_file(clock, ahead + 60, 3600.0)
        later = a.post("/v1/lessons", {"text": "`cargo build` failed: \"could not find 'Cargo.toml'\".",
                                       "kind": "error", "created": ahead})
        assert later["created"] == ahead
        wait_until(lambda: b.has(later["id"]), 60, 0.1, "the later record on b")
        # sync sessions every two world hours: several of them within seconds of wall time
        first = b.status()["sync"]["initiated"]
        wait_until(lambda: b.status()["sync"]["initiated"] >= first + 3, 90, 0.2, "three more sync sessions")
        view = b.get(f"/v1/records/{later['id']}")
        assert view["arrived"] >= ahead  # arrival stamped on the world's clock too
        assert json.loads(clock.read_text())["rate"] == 3600.0
    finally:
        cluster.close()
