"""Describe the machine a benchmark ran on (printed with every result)."""
import os
import platform


def describe() -> str:
    import jax

    cpu = platform.processor() or "unknown cpu"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    dev = jax.devices()[0]
    return (f"machine: {cpu}, {os.cpu_count()} cores; python {platform.python_version()}; jax {jax.__version__}; "
            f"device {dev.platform}:{getattr(dev, 'device_kind', '')} x{jax.device_count()}; "
            f"x64={'on' if jax.config.jax_enable_x64 else 'off'}")
