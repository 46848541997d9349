"""The emulator: a loopback server speaking Anthropic Messages and OpenAI Chat Completions.

Its behaviour is set by a scenario (timing, slots, faults); it records its own ground truth so
that the prober's measurements can be checked. See app.py for the endpoints, engine.py for the
timing model, behaviours.py for how new emulated effects plug in.

    emu = Emulator(load_scenario(None))
    port = await emu.start(host="127.0.0.1", port=0)
    ...  # point a client at emu.base_url
    emu.ground_truth()
    await emu.stop()
"""

from prober.emulator.app import Emulator, serve
from prober.emulator.scenario import Faults, Scenario, load_scenario

__all__ = ["Emulator", "Faults", "Scenario", "load_scenario", "serve"]
