"""Build the optional C decoder; the package works without it (pure-Python fallback)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "traceinspect.xplane._wire",
            sources=["traceinspect/xplane/_wire.c"],
            extra_compile_args=["-O3", "-std=c11"],
            # A machine without a C compiler still installs; traceinspect then decodes
            # with protobuf (slower) and says so in `traceinspect info --json`.
            optional=True,
        )
    ]
)
