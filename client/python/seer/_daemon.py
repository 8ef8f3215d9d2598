"""seer._daemon: TorchLoader(daemon="auto") starts the node's seerd when none
serves the job's socket (docs/torch.md, "seerd follows the job").

One process of the node starts it: every process of the job takes an
exclusive lock on <socket>.lock, looks whether something answers the socket,
and only when nothing does starts seerd with the job's dataset, job id and
socket, $SEER_SEERD_SET's "section.key=value" words and the loader's
seerd_settings, and [daemon] idle_exit_s so that it ends with the job: it exits when
its trainers finish the job, or after idle_exit_s with no trainer (a script
that died); a script relaunched within that time finds it and resumes where
its checkpoint says. The job's definition (batch size, seed, ...) is not on
seerd's command line: it travels in each trainer's handshake.

seerd runs in its own session (a Ctrl-C to the script does not reach it),
with the launcher's MPI/PMI variables removed (it is a one-node job of its
own, not a rank of the trainers' MPI job); its output goes to <socket>.log.
Failure: SeerError naming the binary, the log and its last lines; nothing
is left running when seerd could not start.
"""

import fcntl
import os
import shutil
import socket as _socket
import subprocess
import time

_DROP_ENV = ("OMPI_", "PMIX_", "PMI_", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "SLURM_STEP",
             "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_NPROCS")


def serving(path):
    """Whether a process listens on the unix socket `path` (seerd answers
    there from before its catalog scan)."""
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    try:
        s.connect(path)
        return True
    except OSError:
        return False
    finally:
        s.close()


def seerd_binary(libpath):
    """$SEER_SEERD, else bin/seerd beside libseer's lib/, else seerd on PATH."""
    env = os.environ.get("SEER_SEERD")
    if env:
        return env
    if libpath:
        cand = os.path.join(os.path.dirname(os.path.abspath(libpath)), "..", "bin", "seerd")
        if os.path.exists(cand):
            return os.path.normpath(cand)
    found = shutil.which("seerd")
    if found:
        return found
    return None


def _tail(path, n=12):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def ensure(sock, job_id, root, settings, idle_s, libpath, timeout, error):
    """Start seerd for the job on `sock` unless something serves it. Returns
    the Popen of the seerd started (None: one was serving). error(msg) makes
    the exception to raise."""
    d = os.path.dirname(sock) or "."
    os.makedirs(d, mode=0o700, exist_ok=True)
    lock = open(sock + ".lock", "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if serving(sock):
            return None
        binary = seerd_binary(libpath)
        if binary is None:
            raise error("daemon='auto': no seerd to start (set SEER_SEERD to the seerd binary, "
                        "put it on PATH, or start seerd yourself and pass daemon=None)")
        log = sock + ".log"
        sets = {"dataset.path": root, "job.id": job_id, "daemon.socket": sock,
                "daemon.idle_exit_s": idle_s}
        for kv in os.environ.get("SEER_SEERD_SET", "").split():
            k, eq, v = kv.partition("=")
            if not eq:
                raise error("SEER_SEERD_SET: %r is not section.key=value" % kv)
            sets[k] = v
        sets.update(settings or {})
        args = [binary]
        for k, v in sets.items():
            args += ["--set", "%s=%s" % (k, v)]
        env = {k: v for k, v in os.environ.items() if not k.startswith(_DROP_ENV)}
        with open(log, "w") as out:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, env=env, close_fds=True,
                                    start_new_session=True)
        deadline = time.monotonic() + timeout
        while not serving(sock):
            if proc.poll() is not None:
                raise error("daemon='auto': seerd (%s) exited with status %d before serving; "
                            "its log %s ends:\n%s" % (binary, proc.returncode, log, _tail(log)))
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise error("daemon='auto': seerd (%s) did not open %s within %.0f s; its log "
                            "%s ends:\n%s" % (binary, sock, timeout, log, _tail(log)))
            time.sleep(0.02)
        return proc
    finally:
        lock.close()
