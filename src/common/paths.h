/* Where seer's files live and whether they can be trusted: the job id, the
 * private runtime directory that holds default socket paths, and the owner
 * and mode checks for state directories and files (catalog cache, resume
 * records).
 *
 * Shared by seerd and libseer, so both compute the same default socket path.
 * Thread-safe (reads the environment). Nothing here allocates, logs or
 * aborts: failures are a negative errno plus a sentence in `why`. */
#ifndef SEER_PATHS_H
#define SEER_PATHS_H

#include <stdbool.h>
#include <stddef.h>

/* Job id from $SEER_JOB_ID, $SLURM_JOB_ID, else "default". */
const char *seer_env_job_id(void);

/* The directory for default socket paths, private to the effective user:
 *  - $SEER_RUNTIME_DIR as given (the user vouches for it);
 *  - else $XDG_RUNTIME_DIR, when it is a directory owned by the user that
 *    nobody else may write;
 *  - else ${TMPDIR:-/tmp}/seer-<uid>: a real directory (not a symlink) owned
 *    by the user with no group or other permissions, created 0700 when
 *    `create` and missing.
 * 0; -ENAMETOOLONG; -EPERM when the directory exists with the wrong owner or
 * mode (refused, never used); -errno. */
int path_runtime_dir(char *buf, size_t len, bool create, char *why, size_t whylen);

/* Default socket path of a job: <runtime dir>/seer-<user>-<job id>.sock.
 * Same returns as path_runtime_dir; -ENAMETOOLONG also when the result does
 * not fit a unix socket address (107 bytes). */
int path_default_socket(char *buf, size_t len, const char *job_id, bool create, char *why,
			size_t whylen);
/* The same without creating the directory or saying why (seerctl). */
int seer_default_socket(char *buf, size_t len, const char *job_id);

/* May seer keep state in `dir`? When it exists it must be a directory owned
 * by the effective user that group and others cannot write; every existing
 * ancestor must be owned by root or the user and, when others may write it,
 * have the sticky bit (like /tmp). A missing tail is fine (seer creates it
 * 0700). 0, or -EPERM / -ENOTDIR / -errno with the offending path in why. */
int path_check_private_dir(const char *dir, char *why, size_t whylen);

/* May seer trust the open state file fd (named path in messages)? A regular
 * file owned by the effective user that group and others cannot write.
 * 0, or -EPERM / -errno with why. */
int path_check_owned_file(int fd, const char *path, char *why, size_t whylen);

#endif /* SEER_PATHS_H */
