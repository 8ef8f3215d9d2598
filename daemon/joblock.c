/* The job's state lock (joblock.h has the contract).
 *
 * Why an OFD lock: it belongs to the open file description, not to the
 * process, so no other open/close of the file in seerd can drop it (a
 * classic POSIX lock goes with the first close of any descriptor of the
 * file), and the kernel drops it when the descriptor dies with seerd,
 * whatever kills it. On NFS the client forwards it to the server as a byte-
 * range lock (NFSv4: part of the protocol; NFSv3: through lockd/NLM), so
 * two daemons on two hosts see each other; a holder whose host crashed
 * keeps it until the server's lease runs out (NFSv4: about 90 s). A mount
 * without locks (NFS `nolock`, Lustre without `flock`) fails the lock with
 * ENOLCK/ENOSYS/EOPNOTSUPP: logged, and the job goes on unguarded.
 *
 * The lock file is removed while still locked, and a daemon that locked a
 * file checks that it is still the one at the path (the last holder may
 * have removed it between our open and our lock): otherwise it tries again. */
#define _GNU_SOURCE
#include "joblock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../src/common/base.h"
#include "../src/util/util.h"

char *joblock_dir(const struct seer_config *cfg)
{
	return xasprintf("%s/seer-pos-%s", cfg->daemon.state_dir, cfg->job.id);
}

/* The holder's lines ("host h", "pid p", "socket s", "started t") from the
 * lock file, as "seerd pid p on host h (socket s, started t)"; false when the
 * file names nobody (a clean exit's, or a holder that has not written yet). */
static bool holder(int fd, char *out, size_t len)
{
	char buf[2048];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return false;
	buf[n] = 0;
	const char *keys[4] = { "host ", "pid ", "socket ", "started " };
	char val[4][256] = { "?", "?", "?", "?" };
	for (char *l = buf, *nl; l && *l; l = nl ? nl + 1 : NULL) {
		nl = strchr(l, '\n');
		if (nl)
			*nl = 0;
		for (int k = 0; k < 4; k++)
			if (strncmp(l, keys[k], strlen(keys[k])) == 0)
				snprintf(val[k], sizeof(val[k]), "%s", l + strlen(keys[k]));
	}
	if (strcmp(val[1], "?") == 0)
		return false;
	snprintf(out, len, "seerd pid %s on host %s (socket %s, started %s)", val[1], val[0], val[2],
		 val[3]);
	return true;
}

/* Our name into the locked file; failures only lose the name (logged). */
static void write_holder(int fd, const char *path, const char *sock)
{
	char host[256] = "", when[64] = "?";
	gethostname(host, sizeof(host) - 1);
	time_t t = time(NULL);
	struct tm tm;
	if (gmtime_r(&t, &tm))
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
	char *s = xasprintf("host %s\npid %d\nsocket %s\nstarted %s\n", host, (int)getpid(), sock,
			    when);
	int rc = ftruncate(fd, 0) != 0 ? -errno : pwrite_full(fd, s, strlen(s), 0);
	if (rc == 0 && fsync(fd) != 0) /* NFS: other hosts read it from the server */
		rc = -errno;
	if (rc != 0)
		log_warn("cannot write this seerd's name into %s: %s (a second seerd of this job "
			 "is still refused, without the name)", path, strerror(-rc));
	free(s);
}

int joblock_take(const struct seer_config *cfg, const char *sock, int *fd, char *err,
		 size_t errlen)
{
	*fd = -1;
	char *dir = joblock_dir(cfg), *path = xasprintf("%s/lock", dir);
	const char *unguarded = "a second seerd with this [job] id and [daemon] state_dir would not "
				"be refused and would overwrite this job's resume positions";
	int rc = 0;
	for (int tries = 0; tries <= 100; tries++) {
		if ((rc = mkdir_p(dir, 0700)) != 0) {
			log_warn("cannot create %s: %s; %s", dir, strerror(-rc), unguarded);
			rc = 0;
			break;
		}
		int f = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (f < 0 && errno == ENOENT)
			continue; /* its last holder removed the directory after our mkdir */
		if (f < 0) {
			log_warn("cannot open %s: %s; %s", path, strerror(errno), unguarded);
			break;
		}
		struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
		if (fcntl(f, F_OFD_SETLK, &fl) != 0) {
			int e = errno;
			if (e == EAGAIN || e == EACCES) {
				char who[1400];
				if (!holder(f, who, sizeof(who)))
					snprintf(who, sizeof(who), "another seerd (starting: its name "
						 "is not written yet)");
				snprintf(err, errlen, "[job] id '%s' is in use with this [daemon] "
					 "state_dir: %s holds %s. Two seerd with one job id and "
					 "state_dir overwrite each other's resume positions: give "
					 "this job another [job] id, or stop that seerd first",
					 cfg->job.id, who, path);
				rc = -EBUSY;
			} else {
				log_warn("cannot lock %s: %s (a file system without locks: NFS "
					 "mounted nolock, Lustre without -o flock?); %s", path,
					 strerror(e), unguarded);
			}
			close(f);
			break;
		}
		struct stat a, b;
		if (fstat(f, &a) == 0 && stat(path, &b) == 0 && a.st_dev == b.st_dev &&
		    a.st_ino == b.st_ino) {
			char who[1400];
			if (holder(f, who, sizeof(who)))
				log_warn("took over the job's lock %s from %s, which ended without "
					 "releasing it (killed or crashed)", path, who);
			write_holder(f, path, sock);
			*fd = f;
			break;
		}
		/* its last holder removed it between our open and our lock */
		close(f);
		if (tries == 100)
			log_warn("%s keeps being removed under this seerd; %s", path, unguarded);
	}
	free(path);
	free(dir);
	return rc;
}

void joblock_drop(const struct seer_config *cfg, int fd)
{
	if (fd < 0)
		return;
	char *dir = joblock_dir(cfg), *path = xasprintf("%s/lock", dir);
	unlink(path); /* still locked: see the header comment */
	rmdir(dir);   /* empty once the job completed (or never started) */
	close(fd);
	free(path);
	free(dir);
}
