/* src/common/paths.c: the private runtime directory of default socket paths, and the
 * owner/mode checks for state directories and files. The cases with another
 * owner chown to uid 65534 and need root (skipped otherwise). */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../../src/common/paths.h"

#define OTHER_UID 65534

static char tmp[64], why[1024], buf[4096], own[256];

static void setup(void)
{
	snprintf(tmp, sizeof(tmp), "/tmp/seer-paths-XXXXXX");
	cr_assert_not_null(mkdtemp(tmp));
	setenv("TMPDIR", tmp, 1);
	unsetenv("SEER_RUNTIME_DIR");
	unsetenv("XDG_RUNTIME_DIR");
	snprintf(own, sizeof(own), "%s/seer-%u", tmp, (unsigned)geteuid());
	why[0] = '\0';
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path);
}

static void teardown(void) { nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

TestSuite(paths, .init = setup, .fini = teardown);

static void need_root(void)
{
	if (geteuid() != 0)
		cr_skip_test("needs root to chown to another user");
}

static void assert_has(const char *hay, const char *needle)
{
	cr_assert(strstr(hay, needle), "'%s' lacks '%s'", hay, needle);
}

static const char *sub(const char *name)
{
	static char p[8][512];
	static int k;
	k = (k + 1) % 8;
	snprintf(p[k], sizeof(p[k]), "%s/%s", tmp, name);
	return p[k];
}

Test(paths, runtime_fallback_is_created_0700)
{
	cr_assert_eq(path_runtime_dir(buf, sizeof(buf), false, why, sizeof(why)), 0, "%s", why);
	cr_assert_str_eq(buf, own);
	struct stat st;
	cr_assert_neq(lstat(own, &st), 0, "created without create");
	umask(0); /* mkdir must not depend on the caller's umask */
	cr_assert_eq(path_runtime_dir(buf, sizeof(buf), true, why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(lstat(own, &st), 0);
	cr_assert(S_ISDIR(st.st_mode));
	cr_assert_eq(st.st_mode & 07777, 0700, "mode %o", st.st_mode & 07777);
	cr_assert_eq(st.st_uid, geteuid());
	/* again: it exists and is fine */
	cr_assert_eq(path_runtime_dir(buf, sizeof(buf), true, why, sizeof(why)), 0, "%s", why);
}

Test(paths, runtime_refuses_an_open_directory)
{
	cr_assert_eq(mkdir(own, 0700), 0);
	cr_assert_eq(chmod(own, 0755), 0);
	cr_assert_eq(path_runtime_dir(buf, sizeof(buf), true, why, sizeof(why)), -EPERM);
	assert_has(why, "mode 0755, expected 0700");
	assert_has(why, own);
}

Test(paths, runtime_refuses_another_owner)
{
	need_root();
	cr_assert_eq(mkdir(own, 0700), 0);
	cr_assert_eq(chown(own, OTHER_UID, (gid_t)-1), 0);
	cr_assert_eq(path_runtime_dir(buf, sizeof(buf), false, why, sizeof(why)), -EPERM);
	assert_has(why, "belongs to uid 65534");
	assert_has(why, "SEER_RUNTIME_DIR");
}

Test(paths, runtime_refuses_a_symlink)
{
	cr_assert_eq(mkdir(sub("elsewhere"), 0700), 0);
	cr_assert_eq(symlink(sub("elsewhere"), own), 0);
	cr_assert_eq(path_runtime_dir(buf, sizeof(buf), true, why, sizeof(why)), -EPERM);
	assert_has(why, "not a directory");
}

Test(paths, xdg_runtime_dir_used_when_private)
{
	cr_assert_eq(mkdir(sub("xdg"), 0700), 0);
	setenv("XDG_RUNTIME_DIR", sub("xdg"), 1);
	cr_assert_eq(path_runtime_dir(buf, sizeof(buf), true, why, sizeof(why)), 0, "%s", why);
	cr_assert_str_eq(buf, sub("xdg"));
}

Test(paths, xdg_runtime_dir_open_to_others_is_not_used)
{
	cr_assert_eq(mkdir(sub("xdg"), 0700), 0);
	cr_assert_eq(chmod(sub("xdg"), 0777), 0);
	setenv("XDG_RUNTIME_DIR", sub("xdg"), 1);
	cr_assert_eq(path_runtime_dir(buf, sizeof(buf), true, why, sizeof(why)), 0, "%s", why);
	cr_assert_str_eq(buf, own);
}

Test(paths, xdg_runtime_dir_of_another_user_is_not_used)
{
	need_root();
	cr_assert_eq(mkdir(sub("xdg"), 0700), 0);
	cr_assert_eq(chown(sub("xdg"), OTHER_UID, (gid_t)-1), 0);
	setenv("XDG_RUNTIME_DIR", sub("xdg"), 1);
	cr_assert_eq(path_runtime_dir(buf, sizeof(buf), true, why, sizeof(why)), 0, "%s", why);
	cr_assert_str_eq(buf, own);
}

Test(paths, seer_runtime_dir_is_taken_as_given)
{
	setenv("SEER_RUNTIME_DIR", "/somewhere/chosen", 1);
	cr_assert_eq(path_runtime_dir(buf, sizeof(buf), true, why, sizeof(why)), 0, "%s", why);
	cr_assert_str_eq(buf, "/somewhere/chosen");
}

Test(paths, default_socket_name_and_length)
{
	setenv("SEER_RUNTIME_DIR", "/run/x", 1);
	cr_assert_eq(path_default_socket(buf, sizeof(buf), "j1", false, why, sizeof(why)), 0, "%s",
		     why);
	cr_assert(strncmp(buf, "/run/x/seer-", 12) == 0 && strstr(buf, "-j1.sock"), "%s", buf);
	char longdir[128];
	memset(longdir, 'd', sizeof(longdir) - 1);
	longdir[0] = '/';
	longdir[sizeof(longdir) - 1] = '\0';
	setenv("SEER_RUNTIME_DIR", longdir, 1);
	cr_assert_eq(path_default_socket(buf, sizeof(buf), "j1", false, why, sizeof(why)),
		     -ENAMETOOLONG);
	assert_has(why, "longer than the 107 bytes");
	cr_assert_eq(seer_default_socket(buf, sizeof(buf), "j1"), -ENAMETOOLONG);
}

/* ---- state directories ---------------------------------------------------------- */

Test(paths, private_dir_accepts_ours_and_a_missing_tail)
{
	cr_assert_eq(mkdir(sub("state"), 0700), 0);
	cr_assert_eq(path_check_private_dir(sub("state"), why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(path_check_private_dir(sub("state/a/b/c"), why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(path_check_private_dir(sub("missing/x"), why, sizeof(why)), 0, "%s", why);
	/* a sticky world-writable ancestor, like /tmp */
	cr_assert_eq(mkdir(sub("sticky"), 0700), 0);
	cr_assert_eq(chmod(sub("sticky"), 01777), 0);
	cr_assert_eq(path_check_private_dir(sub("sticky/.cache/seer"), why, sizeof(why)), 0, "%s",
		     why);
	/* relative paths are resolved */
	cr_assert_eq(chdir(tmp), 0);
	cr_assert_eq(path_check_private_dir("state", why, sizeof(why)), 0, "%s", why);
	cr_assert_eq(path_check_private_dir("newdir/x", why, sizeof(why)), 0, "%s", why);
}

Test(paths, private_dir_refuses_what_others_can_write)
{
	cr_assert_eq(mkdir(sub("open"), 0700), 0);
	cr_assert_eq(chmod(sub("open"), 0777), 0); /* no sticky bit */
	cr_assert_eq(path_check_private_dir(sub("open/seer"), why, sizeof(why)), -EPERM);
	assert_has(why, "writable by other users (mode 0777)");
	cr_assert_eq(mkdir(sub("grp"), 0700), 0);
	cr_assert_eq(chmod(sub("grp"), 0770), 0);
	cr_assert_eq(path_check_private_dir(sub("grp"), why, sizeof(why)), -EPERM);
	/* the state directory itself may not be world-writable even when sticky */
	cr_assert_eq(mkdir(sub("st"), 0700), 0);
	cr_assert_eq(chmod(sub("st"), 01777), 0);
	cr_assert_eq(path_check_private_dir(sub("st"), why, sizeof(why)), -EPERM);
}

Test(paths, private_dir_refuses_another_owner)
{
	need_root();
	/* the /tmp/.cache attack: another user's directory on the way */
	cr_assert_eq(mkdir(sub("cache"), 0700), 0);
	cr_assert_eq(chmod(sub("cache"), 0777), 0);
	cr_assert_eq(chown(sub("cache"), OTHER_UID, (gid_t)-1), 0);
	cr_assert_eq(path_check_private_dir(sub("cache/seer"), why, sizeof(why)), -EPERM);
	assert_has(why, "belongs to uid 65534");
	/* ... even when it is not writable: its owner may swap what is inside */
	cr_assert_eq(chmod(sub("cache"), 0755), 0);
	cr_assert_eq(path_check_private_dir(sub("cache/seer"), why, sizeof(why)), -EPERM);
	/* the state directory itself */
	cr_assert_eq(mkdir(sub("theirs"), 0700), 0);
	cr_assert_eq(chown(sub("theirs"), OTHER_UID, (gid_t)-1), 0);
	cr_assert_eq(path_check_private_dir(sub("theirs"), why, sizeof(why)), -EPERM);
	/* reached through a symlink: the target is what is checked */
	cr_assert_eq(symlink(sub("theirs"), sub("link")), 0);
	cr_assert_eq(path_check_private_dir(sub("link"), why, sizeof(why)), -EPERM);
	assert_has(why, "theirs");
}

Test(paths, private_dir_must_be_a_directory)
{
	int fd = open(sub("file"), O_CREAT | O_WRONLY, 0600);
	cr_assert_geq(fd, 0);
	close(fd);
	cr_assert_eq(path_check_private_dir(sub("file"), why, sizeof(why)), -ENOTDIR);
}

/* ---- state files -------------------------------------------------------------------- */

static int make_file(const char *name, mode_t mode)
{
	int fd = open(sub(name), O_CREAT | O_RDWR, 0600);
	cr_assert_geq(fd, 0);
	cr_assert_eq(fchmod(fd, mode), 0);
	return fd;
}

Test(paths, owned_file)
{
	int fd = make_file("ok", 0644);
	cr_assert_eq(path_check_owned_file(fd, "ok", why, sizeof(why)), 0, "%s", why);
	close(fd);
	fd = make_file("open", 0666);
	cr_assert_eq(path_check_owned_file(fd, "open", why, sizeof(why)), -EPERM);
	assert_has(why, "writable by other users");
	close(fd);
	fd = open(tmp, O_RDONLY | O_DIRECTORY);
	cr_assert_eq(path_check_owned_file(fd, "dir", why, sizeof(why)), -EPERM);
	assert_has(why, "not a regular file");
	close(fd);
}

Test(paths, owned_file_of_another_user)
{
	need_root();
	int fd = make_file("theirs", 0600);
	cr_assert_eq(fchown(fd, OTHER_UID, (gid_t)-1), 0);
	cr_assert_eq(path_check_owned_file(fd, "catalog.bin", why, sizeof(why)), -EPERM);
	assert_has(why, "catalog.bin belongs to uid 65534");
	close(fd);
}
