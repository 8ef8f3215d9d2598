/* paths.c: job id, the private runtime directory, trust checks for state
 * (see paths.h). Linked into libseer and seerd; no allocation, no logging. */
#define _GNU_SOURCE
#include "paths.h"

#include <errno.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

const char *seer_env_job_id(void)
{
	const char *v = getenv("SEER_JOB_ID");
	if (v && *v)
		return v;
	v = getenv("SLURM_JOB_ID");
	if (v && *v)
		return v;
	return "default";
}

static void user_name(uid_t uid, char *buf, size_t len)
{
	struct passwd pw, *res = NULL;
	char pwbuf[1024];
	if (getpwuid_r(uid, &pw, pwbuf, sizeof(pwbuf), &res) == 0 && res)
		snprintf(buf, len, "%s", res->pw_name);
	else
		snprintf(buf, len, "%u", (unsigned)uid);
}

/* "uid 65534 (nobody)" */
static const char *describe_uid(uid_t uid, char *buf, size_t len)
{
	char name[64];
	user_name(uid, name, sizeof(name));
	snprintf(buf, len, "uid %u (%s)", (unsigned)uid, name);
	return buf;
}

/* A path for a message: its head and tail when long, so that what follows
 * it (the reason) is never cut off. */
#define PATH_SHOW 160
static const char *path_show(char buf[PATH_SHOW], const char *path)
{
	size_t n = strlen(path);
	if (n < PATH_SHOW)
		return path;
	snprintf(buf, PATH_SHOW, "%.50s...%s", path, path + n - (PATH_SHOW - 54));
	return buf;
}

static int not_owner(const char *path, const struct stat *st, char *why, size_t whylen)
{
	char a[96], b[96], p[PATH_SHOW];
	snprintf(why, whylen, "%s belongs to %s, not to you (%s)", path_show(p, path),
		 describe_uid(st->st_uid, a, sizeof(a)), describe_uid(geteuid(), b, sizeof(b)));
	return -EPERM;
}

/* The private fallback: ${TMPDIR:-/tmp}/seer-<uid>, owner and mode checked. */
static int private_tmp_dir(char *buf, size_t len, bool create, char *why, size_t whylen)
{
	const char *tmp = getenv("TMPDIR");
	if (!tmp || !*tmp)
		tmp = "/tmp";
	int n = snprintf(buf, len, "%s/seer-%u", tmp, (unsigned)geteuid());
	if (n < 0 || (size_t)n >= len) {
		snprintf(why, whylen, "runtime directory under %s: path too long", tmp);
		return -ENAMETOOLONG;
	}
	struct stat st;
	if (lstat(buf, &st) != 0) {
		if (errno != ENOENT || !create)
			return errno == ENOENT ? 0 : -errno; /* missing: nothing listens yet */
		if (mkdir(buf, 0700) != 0 && errno != EEXIST) {
			int e = errno;
			snprintf(why, whylen, "cannot create the runtime directory %s: %s", buf,
				 strerror(e));
			return -e;
		}
		if (lstat(buf, &st) != 0) {
			int e = errno;
			snprintf(why, whylen, "runtime directory %s: %s", buf, strerror(e));
			return -e;
		}
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(why, whylen, "runtime directory %s is not a directory (a symlink or file "
			 "planted by someone?): remove it, or set SEER_RUNTIME_DIR", buf);
		return -EPERM;
	}
	if (st.st_uid != geteuid()) {
		not_owner(buf, &st, why, whylen);
		size_t k = strlen(why);
		snprintf(why + k, whylen - k, ": another user could pose as seerd there; remove "
			 "it, or set SEER_RUNTIME_DIR");
		return -EPERM;
	}
	if ((st.st_mode & 077) != 0) {
		snprintf(why, whylen, "runtime directory %s has mode %04o, expected 0700: another "
			 "user could pose as seerd there; chmod 700 it, or set SEER_RUNTIME_DIR", buf,
			 (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

int path_runtime_dir(char *buf, size_t len, bool create, char *why, size_t whylen)
{
	const char *dir = getenv("SEER_RUNTIME_DIR");
	if (!dir || !*dir) {
		dir = getenv("XDG_RUNTIME_DIR");
		struct stat st;
		/* systemd's /run/user/<uid>: the user's own, 0700 */
		if (!dir || !*dir || stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
		    st.st_uid != geteuid() || (st.st_mode & 022) != 0)
			return private_tmp_dir(buf, len, create, why, whylen);
	}
	if ((size_t)snprintf(buf, len, "%s", dir) >= len) {
		snprintf(why, whylen, "runtime directory %.200s...: path too long", dir);
		return -ENAMETOOLONG;
	}
	return 0;
}

int path_default_socket(char *buf, size_t len, const char *job_id, bool create, char *why,
			size_t whylen)
{
	char dir[PATH_MAX];
	int rc = path_runtime_dir(dir, sizeof(dir), create, why, whylen);
	if (rc != 0)
		return rc;
	char user[64];
	user_name(geteuid(), user, sizeof(user));
	int n = snprintf(buf, len, "%s/seer-%s-%s.sock", dir, user, job_id);
	if (n < 0 || (size_t)n >= len || (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		snprintf(why, whylen, "the default socket path %.200s/seer-%s-%s.sock is longer than "
			 "the %zu bytes a unix socket address holds: set a shorter SEER_RUNTIME_DIR "
			 "or job id, or an explicit socket path", dir, user, job_id,
			 sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		return -ENAMETOOLONG;
	}
	return 0;
}

int seer_default_socket(char *buf, size_t len, const char *job_id)
{
	char why[512];
	return path_default_socket(buf, len, job_id, false, why, sizeof(why));
}

/* One existing path component: `last` is the state directory itself. */
static int check_component(const char *path, bool last, char *why, size_t whylen)
{
	struct stat st;
	char p[PATH_SHOW];
	if (stat(path, &st) != 0) {
		int e = errno;
		snprintf(why, whylen, "%s: %s", path_show(p, path), strerror(e));
		return -e;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(why, whylen, "%s is not a directory", path_show(p, path));
		return -ENOTDIR;
	}
	uid_t me = geteuid();
	if (last ? st.st_uid != me : st.st_uid != me && st.st_uid != 0)
		return not_owner(path, &st, why, whylen);
	bool others_write = (st.st_mode & 022) != 0;
	if (others_write && (last || !(st.st_mode & S_ISVTX))) {
		snprintf(why, whylen, "%s is writable by other users (mode %04o)", path_show(p, path),
			 (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	return 0;
}

int path_check_private_dir(const char *dir, char *why, size_t whylen)
{
	char have[PATH_MAX], real[PATH_MAX];
	if (!dir || !*dir || (size_t)snprintf(have, sizeof(have), "%s", dir) >= sizeof(have)) {
		snprintf(why, whylen, "state directory '%.200s': empty or too long", dir ? dir : "");
		return -ENAMETOOLONG;
	}
	/* the longest prefix that exists; the missing rest is created later, by us */
	bool whole = true;
	while (access(have, F_OK) != 0 && strcmp(have, "/") != 0) {
		whole = false;
		char *slash = strrchr(have, '/');
		if (slash == have) {
			have[1] = '\0';
		} else if (slash) {
			*slash = '\0';
		} else if (!getcwd(have, sizeof(have))) {
			snprintf(why, whylen, "%s: cannot resolve the working directory", dir);
			return -ENOENT;
		}
	}
	if (!realpath(have, real)) {
		int e = errno;
		char p[PATH_SHOW];
		snprintf(why, whylen, "%s: %s", path_show(p, have), strerror(e));
		return -e;
	}
	/* every component of the resolved path, from the root down: /, /a, /a/b */
	int rc = check_component("/", whole && real[1] == '\0', why, whylen);
	for (char *p = real + 1; rc == 0 && *p; p++) {
		if (p[1] != '/' && p[1] != '\0')
			continue;
		char c = p[1];
		p[1] = '\0';
		rc = check_component(real, whole && c == '\0', why, whylen);
		p[1] = c;
	}
	return rc;
}

int path_check_owned_file(int fd, const char *path, char *why, size_t whylen)
{
	struct stat st;
	char p[PATH_SHOW];
	if (fstat(fd, &st) != 0) {
		int e = errno;
		snprintf(why, whylen, "%s: %s", path_show(p, path), strerror(e));
		return -e;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "%s is not a regular file", path_show(p, path));
		return -EPERM;
	}
	if (st.st_uid != geteuid())
		return not_owner(path, &st, why, whylen);
	if ((st.st_mode & 022) != 0) {
		snprintf(why, whylen, "%s is writable by other users (mode %04o)", path_show(p, path),
			 (unsigned)(st.st_mode & 07777));
		return -EPERM;
	}
	return 0;
}
