/* The PFS emulator's start-up: checks of the source, mount point, /dev/fuse
 * and --stats path with messages saying what to do, the summary of the
 * limits in force, and daemonizing once mounted (see emu.h for the shared
 * state).
 *
 * Threads: main thread only, before the FUSE loop starts.
 * Failure: every check logs the problem and returns -1 (main exits 1);
 * emu_daemonize returns -errno when fork or pipe fail. */
#define _GNU_SOURCE
#include "emu.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/util/util.h"

static char *abs_path(const char *p)
{
	if (p[0] == '/')
		return xstrdup(p);
	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof(cwd)))
		return xstrdup(p);
	return xasprintf("%s/%s", cwd, p);
}

int emu_check_fuse_dev(void)
{
	int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		log_error("cannot open /dev/fuse: %s (is the fuse module loaded and the device "
			  "available in this container? libfuse3/fuse3 installed?)", strerror(errno));
		return -1;
	}
	close(fd);
	return 0;
}

/* Opens emu.src_fd and fills emu.src (canonical). */
int emu_check_source(const char *src)
{
	struct stat st;
	if (stat(src, &st) != 0) {
		log_error("source directory %s: %s", src, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		log_error("source %s is not a directory", src);
		return -1;
	}
	emu.src_fd = open(src, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (emu.src_fd < 0) {
		log_error("cannot open source directory %s: %s", src, strerror(errno));
		return -1;
	}
	emu.src = realpath(src, NULL);
	if (!emu.src) {
		log_error("source directory %s: %s", src, strerror(errno));
		return -1;
	}
	return 0;
}

/* The mount point must be an empty directory outside the source tree. */
int emu_check_mountpoint(const char *mnt)
{
	struct stat st;
	if (stat(mnt, &st) != 0) {
		if (errno == ENOTCONN)
			log_error("mountpoint %s is a dead FUSE mount (its emulator exited): run "
				  "`fusermount3 -u %s` first", mnt, mnt);
		else
			log_error("mountpoint %s: %s", mnt, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		log_error("mountpoint %s is not a directory", mnt);
		return -1;
	}
	DIR *dp = opendir(mnt);
	if (!dp) {
		log_error("mountpoint %s: %s", mnt, strerror(errno));
		return -1;
	}
	struct dirent *e;
	const char *found = NULL;
	while ((e = readdir(dp)))
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
			found = e->d_name;
			break;
		}
	if (found)
		log_error("mountpoint %s is not empty (it holds '%s'%s)", mnt, found,
			  strcmp(found, CTL_DIR) == 0 ? ": an emulator is already mounted there" : "");
	closedir(dp);
	if (found)
		return -1;
	emu.mnt = realpath(mnt, NULL);
	if (!emu.mnt) {
		log_error("mountpoint %s: %s", mnt, strerror(errno));
		return -1;
	}
	size_t n = strlen(emu.src);
	if (strcmp(emu.mnt, emu.src) == 0 ||
	    (strncmp(emu.mnt, emu.src, n) == 0 && (emu.mnt[n] == '/' || n == 1))) {
		log_error("mountpoint %s lies inside the source %s: the emulator would read "
			  "through itself", emu.mnt, emu.src);
		return -1;
	}
	return 0;
}

int emu_check_stats_path(void)
{
	if (!emu.o.stats_path)
		return 0;
	char *abs = abs_path(emu.o.stats_path);
	emu.stats_path = abs; /* the daemon changes to / */
	char *slash = strrchr(abs, '/');
	char *dir = xasprintf("%.*s", (int)(slash - abs), abs);
	int rc = 0;
	if (access(*dir ? dir : "/", W_OK) != 0) {
		log_error("--stats %s: directory %s is not writable: %s", emu.o.stats_path,
			  *dir ? dir : "/", strerror(errno));
		rc = -1;
	}
	free(dir);
	return rc;
}

static const char *limit_text(char *buf, size_t len, uint64_t n)
{
	if (!n)
		return "unlimited";
	snprintf(buf, len, "%llu", (unsigned long long)n);
	return buf;
}

void emu_print_limits(void)
{
	const struct emu_opts *o = &emu.o;
	const struct pfsm_config *c = &emu.model.c;
	char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32], bw[64], l1[24], l2[24], l3[24];
	if (o->bandwidth)
		snprintf(bw, sizeof(bw), "%.2f MB/s (%s/s)", (double)o->bandwidth / 1e6,
			 fmt_size(b1, sizeof(b1), o->bandwidth));
	else
		snprintf(bw, sizeof(bw), "unlimited");
	if (o->foreground)
		log_info("%s -> %s, pid %d, %llu threads", emu.src, emu.mnt, (int)getpid(),
			 (unsigned long long)o->threads);
	else
		log_info("%s -> %s, %llu threads", emu.src, emu.mnt,
			 (unsigned long long)o->threads);
	if (o->preset)
		log_info("preset %s (options given after it override it)", o->preset);
	log_info("limits: bandwidth %s, burst %s; latency %.3f ms per read RPC, %.3f ms per "
		 "metadata op", bw, fmt_size(b2, sizeof(b2), o->burst), o->latency_ms,
		 o->meta_latency_ms);
	log_info("in flight: %s over the mount%s, %s per OST (%llu OST%s), %s metadata",
		 limit_text(l1, sizeof(l1), o->max_inflight),
		 o->max_inflight > o->threads ? " (capped by --threads)" : "",
		 limit_text(l2, sizeof(l2), o->ost_inflight), (unsigned long long)o->osts,
		 o->osts == 1 ? "" : "s", limit_text(l3, sizeof(l3), o->meta_inflight));
	log_info("RPCs of at most %s; readahead %s%s", fmt_size(b5, sizeof(b5), c->rpc_size),
		 o->readahead ? fmt_size(b6, sizeof(b6), o->readahead) : "off",
		 o->readahead ? " per open file" : "");
	log_info("kernel: direct_io, max_read %s, st_blksize %s, attr/entry timeout %.3g s",
		 fmt_size(b3, sizeof(b3), o->max_read), fmt_size(b4, sizeof(b4), o->blksize),
		 o->attr_timeout);
	if (o->fault_rate > 0) {
		char kinds[64] = "";
		for (unsigned i = 0; i < emu.nkinds; i++)
			snprintf(kinds + strlen(kinds), sizeof(kinds) - strlen(kinds), "%s%s",
				 i ? "," : "", fault_names[emu.kinds[i]]);
		log_info("faults: rate %g per read, kinds %s, files matching \"%s\", seed %llu",
			 o->fault_rate, kinds, o->fault_path, (unsigned long long)o->fault_seed);
	} else {
		log_info("faults: off");
	}
	log_info("counters: %s/" CTL_DIR "/stats%s%s", emu.mnt,
		 emu.stats_path ? ", final JSON to " : "", emu.stats_path ? emu.stats_path : "");
}

/* Detach from the terminal once mounted. The parent prints the daemon's pid
 * and exits 0 when the child is ready, 1 if it died first. stderr of the
 * daemon goes to log_fd, or /dev/null when log_fd < 0. Returns 0 in the
 * daemon, -errno on failure (in the original process). */
int emu_daemonize(int log_fd)
{
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) != 0)
		return -errno;
	pid_t pid = fork();
	if (pid < 0) {
		int err = errno;
		close(pfd[0]);
		close(pfd[1]);
		return -err;
	}
	if (pid > 0) {
		close(pfd[1]);
		char c = 1;
		ssize_t n;
		while ((n = read(pfd[0], &c, 1)) < 0 && errno == EINTR) {
		}
		if (n == 1 && c == 0) {
			log_info("running in the background as pid %d", (int)pid);
			_exit(0);
		}
		log_error("the daemon exited during start-up");
		_exit(1);
	}
	close(pfd[0]);
	setsid();
	if (chdir("/") != 0)
		log_warn("chdir /: %s", strerror(errno));
	int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (nul >= 0) {
		dup2(nul, STDIN_FILENO);
		dup2(nul, STDOUT_FILENO);
		dup2(log_fd >= 0 ? log_fd : nul, STDERR_FILENO);
		close(nul);
	}
	char ok = 0;
	ssize_t w UNUSED = write(pfd[1], &ok, 1);
	close(pfd[1]);
	return 0;
}
