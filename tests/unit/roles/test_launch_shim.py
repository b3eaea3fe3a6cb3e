"""The sglang_server role's launcher shim: the API key reaches the server's argv only, never
its environment, and every form of it is filtered out of what the server prints."""
import os
import pathlib
import pwd
import shutil
import subprocess
import sys
import tempfile

import jinja2
import pytest

ROLE = pathlib.Path(__file__).resolve().parents[3] / 'roles' / 'sglang_server'
KEY = 'sk-shim\'test"key\\x'
KEY_ENV = 'LLMOPS_SERVER_API_KEY_FILE'
ADMIN_KEY_ENV = 'LLMOPS_SERVER_ADMIN_API_KEY_FILE'
ADMIN_KEY = 'sk-admin\'shim"key'
# The commit of release 1.0.0 (no tag in the repository).
USER_ENV = 'LLMOPS_SERVER_USER'

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


def render(text, admin_env=''):
    # As Ansible's template lookup renders it (trim_blocks).
    return jinja2.Environment(trim_blocks=True).from_string(text).render(
        ansible_managed='test', __sglang_server_api_key_file_env=KEY_ENV, __sglang_server_user_env=USER_ENV,
        __sglang_server_admin_api_key_file_env=admin_env)


@pytest.fixture
def shim(tmp_path):
    rendered = render((ROLE / 'templates' / 'llmops_launch.py.j2').read_text())
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


def test_with_a_key_a_crash_at_import_is_in_the_log_when_the_server_has_exited(shim, tmp_path):
    """The log filter outlives the server: the server waits for it at exit, so the traceback is
    written before the server's process ends (systemd kills what is left of the unit then)."""
    (tmp_path / 'crashing_server.py').write_text('print("loading", flush=True)\nraise RuntimeError("boom at import")\n')
    key_file = tmp_path / 'server.key'
    key_file.write_text(KEY + '\n')
    log = tmp_path / 'server.log'
    env = dict(os.environ, PYTHONPATH=str(tmp_path), **{KEY_ENV: str(key_file)})
    with open(log, 'wb') as out:
        proc = subprocess.run([sys.executable, str(shim), 'crashing_server'], stdout=out, stderr=subprocess.STDOUT,
                              env=env, check=False, timeout=60)
    assert proc.returncode == 1
    text = log.read_text()
    assert 'loading' in text and 'RuntimeError: boom at import' in text, text


def test_a_key_file_that_does_not_exist_means_no_key(shim, tmp_path):
    """The role always names the key file (a rollback must not decide whether there is a key)
    and removes it for a server without one: no file, no --api-key, nothing filtered."""
    env = dict(os.environ, PYTHONPATH=str(tmp_path), **{KEY_ENV: str(tmp_path / 'no-such.key')})
    (tmp_path / 'whoami_server.py').write_text(WHOAMI)
    out = subprocess.run([sys.executable, str(shim), 'whoami_server'], env=env, capture_output=True, text=True,
                         check=True, timeout=60).stdout
    assert 'key=no' in out


# Prints who it runs as, whether it may gain privileges, and the key it got.
WHOAMI = r'''
import os, sys
with open("/proc/self/status") as status:
    nnp = [line.split()[1] for line in status if line.startswith("NoNewPrivs:")][0]
print("uid=%d gid=%d groups=%s home=%s nnp=%s user_env=%s key=%s" % (
    os.getuid(), os.getgid(), os.getgroups(), os.environ.get("HOME"), nnp,
    "LLMOPS_SERVER_USER" in os.environ, "yes" if "--api-key" in sys.argv else "no"))
'''


def test_started_as_root_the_shim_becomes_the_servers_user_before_it_reads_the_key(shim, tmp_path):
    """The process launcher starts the shim as root: server and log filter run as the user,
    with no_new_privs, and the key file (owner the user, 0600) is read as that user.
    Not as root (a developer's run), the shim cannot switch and runs the server as it is."""
    nobody = pwd.getpwnam('nobody')
    public = pathlib.Path(tempfile.mkdtemp(prefix='llmops-shim-'))
    try:
        public.chmod(0o755)
        shutil.copy(shim, public / 'llmops_launch.py')
        (public / 'whoami_server.py').write_text(WHOAMI)
        key_file = public / 'server.key'
        key_file.write_text('sk-user-switch\n')
        key_file.chmod(0o600)
        root = os.geteuid() == 0
        if root:
            os.chown(key_file, nobody.pw_uid, nobody.pw_gid)
        env = dict(os.environ, PYTHONPATH=str(public), **{KEY_ENV: str(key_file), USER_ENV: 'nobody'})
        # The system interpreter: this test's may live under /root, which the user cannot enter.
        out = subprocess.run(['/usr/bin/python3', str(public / 'llmops_launch.py'), 'whoami_server'], env=env, cwd='/',
                             capture_output=True, text=True, check=True, timeout=60).stdout
    finally:
        shutil.rmtree(public)
    if root:
        assert 'uid=%d gid=%d groups=[] home=%s nnp=1 user_env=False key=yes' % (
            nobody.pw_uid, nobody.pw_gid, nobody.pw_dir) in out.replace('groups=[%d]' % nobody.pw_gid, 'groups=[]')
    else:
        assert 'uid=%d ' % os.getuid() in out and 'user_env=False key=yes' in out


# Prints the keys its argv holds the ways SGLang prints its arguments.
ADMIN_SERVER = r'''
import sys
key = sys.argv[sys.argv.index("--api-key") + 1] if "--api-key" in sys.argv else None
admin = sys.argv[sys.argv.index("--admin-api-key") + 1] if "--admin-api-key" in sys.argv else None
print("server_args=ServerArgs(api_key=%r, admin_api_key=%r)" % (key, admin), flush=True)
print("raw " + str(key) + " " + str(admin), flush=True)
'''


@pytest.mark.parametrize('with_key', [True, False])
def test_the_admin_key_reaches_the_argv_from_its_own_file_and_no_log(tmp_path, with_key):
    shim = tmp_path / 'llmops_launch.py'
    shim.write_text(render((ROLE / 'templates' / 'llmops_launch.py.j2').read_text(), ADMIN_KEY_ENV))
    (tmp_path / 'admin_server.py').write_text(ADMIN_SERVER)
    admin_file = tmp_path / 'server.admin.key'
    admin_file.write_text(ADMIN_KEY + '\n')
    key_file = tmp_path / 'server.key'
    if with_key:
        key_file.write_text(KEY + '\n')
    env = dict(os.environ, PYTHONPATH=str(tmp_path), **{KEY_ENV: str(key_file), ADMIN_KEY_ENV: str(admin_file)})
    out = subprocess.run([sys.executable, str(shim), 'admin_server'], env=env, capture_output=True, text=True,
                         check=True, timeout=60).stdout
    for form in (ADMIN_KEY, repr(ADMIN_KEY)[1:-1], KEY, repr(KEY)[1:-1]):
        assert form not in out
    if with_key:
        assert "server_args=ServerArgs(api_key='<redacted>', admin_api_key='<redacted>')" in out
        assert 'raw <redacted> <redacted>' in out
    else:
        assert "server_args=ServerArgs(api_key=None, admin_api_key='<redacted>')" in out


def test_without_an_admin_key_the_shim_is_the_one_of_1_0_0():
    """Upgrading a fleet that sets no admin key restarts no server: its shim is unchanged. The 1.0.0 template is
    kept beside this test (from commit 68bce7c), so that a shallow clone checks it too."""
    old = (pathlib.Path(__file__).parent / 'fixtures' / 'llmops_launch-1.0.0.py.j2').read_text()
    assert render((ROLE / 'templates' / 'llmops_launch.py.j2').read_text()) == render(old)
