/* Format lookup by name, from the one list in fmt/registry.h.
 *
 * Read-only tables built at compile time: any thread. */
#include "fmt.h"

#include <string.h>

#include "../util/util.h"

#define FMT_ENTRY(name, desc) &fmt_##name,
static const struct fmt_ops *const all[] = { FMT_LIST(FMT_ENTRY) };
#undef FMT_ENTRY

#define FMT_NAME_ITEM(name, desc) ", " #name
/* ", files, npz, ...": skip the first two characters */
static const char names[] = "" FMT_LIST(FMT_NAME_ITEM);
#undef FMT_NAME_ITEM

const struct fmt_ops *fmt_registry_find(const char *name)
{
	for (size_t i = 0; i < ARRAY_SIZE(all); i++)
		if (strcmp(all[i]->name, name) == 0)
			return all[i];
	return NULL;
}

const char *fmt_registry_names(void)
{
	return names + 2;
}
