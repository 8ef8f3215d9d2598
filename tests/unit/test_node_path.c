/* "%n" expansion of configured paths (daemon/node_path.c): every "%n" becomes
 * the node rank, other text is kept, and a result that does not fit is an
 * error rather than a silently shortened path. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "../../daemon/node_path.h"

Test(node_path, expands_every_n)
{
	char out[64];
	cr_assert_eq(node_path(out, sizeof(out), "/run/seer-%n/s%n.sock", 12), 0);
	cr_assert_str_eq(out, "/run/seer-12/s12.sock");
	cr_assert_eq(node_path(out, sizeof(out), "plain %d %s 100%", 3), 0);
	cr_assert_str_eq(out, "plain %d %s 100%", "only %%n is special");
	cr_assert_eq(node_path(out, sizeof(out), "", 3), 0);
	cr_assert_str_eq(out, "");
}

Test(node_path, too_long_is_an_error)
{
	char out[8];
	cr_assert_eq(node_path(out, sizeof(out), "abcdefg", 1), 0, "7 characters fit in 8");
	cr_assert_str_eq(out, "abcdefg");
	cr_assert_eq(node_path(out, sizeof(out), "abcdefgh", 1), -ENAMETOOLONG);
	cr_assert_str_eq(out, "");
	cr_assert_eq(node_path(out, sizeof(out), "abcde%n", 123), -ENAMETOOLONG,
		     "the node rank makes it too long");
	cr_assert_eq(node_path(out, sizeof(out), "abcd%n", 123), 0);
	cr_assert_str_eq(out, "abcd123");
	cr_assert_eq(node_path(out, 0, "", 0), -ENAMETOOLONG);
}
