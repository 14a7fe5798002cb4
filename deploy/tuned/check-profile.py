#!/usr/bin/python3
"""Load a tuned profile directory the way tuned does (includes, merging,
[variables] and their functions, assertions), without applying anything,
and print what its plugins would get. Usage: check-profile.py DIR.
Exit 0 when tuned loads it and every assertion passes; 1 otherwise; 77 when
tuned's Python modules are not installed (apt-get install tuned)."""
import atexit
import glob
import logging
import os
import shutil
import sys

try:
    import tuned.consts as consts
    import tuned.profiles as profiles
    from tuned.profiles.variables import Variables
    from tuned.utils.global_config import GlobalConfig
except ImportError as e:
    print(f"skip: tuned's Python modules are not installed ({e})")
    sys.exit(77)

class ErrorCounter(logging.Handler):
    """tuned logs an error (and goes on) for a failed assertion, a missing
    variables file or a bad function: count them."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.errors = []

    def emit(self, record):
        self.errors.append(record.getMessage())


errors = ErrorCounter()
logging.getLogger("tuned").addHandler(errors)
# cpu-partitioning's variables run `mktemp -d` when loaded: remove what it makes.
tmp_before = set(glob.glob("/tmp/tmp.*"))


@atexit.register
def remove_tuned_tmpdirs():
    for path in set(glob.glob("/tmp/tmp.*")) - tmp_before:
        shutil.rmtree(path, ignore_errors=True)


profile_dir = os.path.abspath(sys.argv[1])
name = os.path.basename(profile_dir)
system_dirs = [d for d in ("/usr/lib/tuned/profiles", "/usr/lib/tuned") if os.path.isdir(d)]
locator = profiles.Locator([os.path.dirname(profile_dir)] + system_dirs)
variables = Variables()
loader = profiles.Loader(locator, profiles.Factory(), profiles.Merger(), GlobalConfig(), variables)
try:
    profile = loader.load([name])
except Exception as e:  # tuned raises its own exception types
    print(f"tuned cannot load {profile_dir}: {e}")
    sys.exit(1)

for unit_name, unit in profile.units.items():
    for option, value in unit.options.items():
        print(f"[{unit_name}] {option} = {variables.expand(str(value))}")
for message in errors.errors:
    print(f"tuned error: {message}")
sys.exit(1 if errors.errors else 0)
