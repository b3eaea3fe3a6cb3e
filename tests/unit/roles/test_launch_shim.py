"""The sglang_server role's launcher shim: the API key reaches the server's argv only, never
its environment, and every form of it is filtered out of what the server prints."""
import os
import pathlib
import subprocess
import sys

import jinja2
import pytest

ROLE = pathlib.Path(__file__).resolve().parents[3] / 'roles' / 'sglang_server'
KEY = 'sk-shim\'test"key\\x'
KEY_ENV = 'LLMOPS_SERVER_API_KEY_FILE'

# A stand-in server module: prints its argv's key the ways real servers do (SGLang's
# ServerArgs repr, vLLM's dict of args, a JSON dump, the raw value), from itself and from a
# child process, with a progress bar's carriage returns and a last line with no line end.
SERVER = r'''
import json, os, subprocess, sys
key = sys.argv[sys.argv.index("--api-key") + 1]
print("server_args=ServerArgs(model_path='m', api_key=%r, port=1)" % key, flush=True)
print("non-default args: %r" % {"api_key": key}, flush=True)
print(json.dumps({"api_key": key}), flush=True)
sys.stderr.write("Loading 10%|#  |\r" + "x" * 70000 + key + "\rdone " + key + "\n")
sys.stderr.flush()
subprocess.run([sys.executable, "-c", "import sys; print(sys.argv[1])", "child " + key], check=True)
with open("/proc/self/environ", "rb") as environ:
    print("ENVIRON-HAS-KEY" if key.encode() in environ.read() else "environ clean", flush=True)
sys.stdout.write("no line end " + key)
'''


@pytest.fixture
def shim(tmp_path):
    text = (ROLE / 'templates' / 'llmops_launch.py.j2').read_text()
    rendered = jinja2.Template(text).render(ansible_managed='test', __sglang_server_api_key_file_env=KEY_ENV)
    path = tmp_path / 'llmops_launch.py'
    path.write_text(rendered)
    (tmp_path / 'fake_server.py').write_text(SERVER)
    return path


def run(shim, tmp_path, key):
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    if key is not None:
        key_file = tmp_path / 'server.key'
        key_file.write_text(key + '\n')
        env[KEY_ENV] = str(key_file)
    log = tmp_path / 'server.log'
    with open(log, 'wb') as out:
        if key is None:
            argv = [sys.executable, str(shim), 'fake_server', '--api-key', 'plain']
        else:
            argv = [sys.executable, str(shim), 'fake_server']
        subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, env=env, check=True, timeout=60)
    return log.read_bytes()


def test_key_in_no_form_in_the_log_and_not_in_the_environment(shim, tmp_path):
    log = run(shim, tmp_path, KEY)
    forms = [KEY, repr(KEY)[1:-1], KEY.replace('\\', '\\\\').replace('"', '\\"')]
    for form in forms:
        assert form.encode() not in log
    text = log.decode()
    assert "server_args=ServerArgs(model_path='m', api_key='<redacted>', port=1)" in text
    assert '"api_key": "<redacted>"' in text
    assert 'child <redacted>' in text
    assert 'environ clean' in text and 'ENVIRON-HAS-KEY' not in text
    # Nothing else is lost: the long bar, its carriage returns and the unterminated last line.
    assert '\r' + 'x' * 70000 + '<redacted>\rdone <redacted>\n' in text
    assert text.endswith('no line end <redacted>')


def test_without_a_key_the_output_is_untouched(shim, tmp_path):
    log = run(shim, tmp_path, None).decode()
    assert "api_key='plain'" in log and 'child plain' in log
