/* The files format: one sample per file, labelled by its class directory.
 *
 * A sample is the whole file (dtype BYTES); with class directories
 * (root/<class>/<file>) its label is the index of <class> among every
 * directory of the root, sorted (torchvision's find_classes: a directory
 * left with no sample keeps its index, src/catalog/catalog.c), else 0.
 * dataset.extensions filters by extension.
 * Scan runs on the catalog-building thread; read on any reader's thread. */
#define _GNU_SOURCE
#include "fmt.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#include "seer.h"
#include "../util/util.h"

static bool files_accept(const struct catalog_params *p, const char *relpath)
{
	if (!p->extensions || !*p->extensions)
		return true;
	const char *dot = strrchr(relpath, '.');
	if (!dot)
		return false;
	size_t el = strlen(dot + 1);
	for (const char *e = p->extensions; *e;) {
		const char *comma = strchr(e, ',');
		size_t n = comma ? (size_t)(comma - e) : strlen(e);
		while (n && *e == ' ')
			e++, n--;
		if (n == el && strncasecmp(e, dot + 1, n) == 0)
			return true;
		if (!comma)
			break;
		e = comma + 1;
	}
	return false;
}

static int files_scan(struct catalog_builder *b, uint32_t file, int fd, uint64_t size)
{
	(void)fd;
	const char *rel = catalog_builder_path(b, file);
	int64_t label = catalog_builder_class(b, rel);
	if (label < 0) {
		catalog_builder_error(b, "file sits beside class directories: move it into a class "
				     "directory, or point dataset.path at a flat directory");
		return SEER_EDATASET;
	}
	static const struct seer_wire_type bytes = { .dtype = SEER_DT_BYTES };
	uint32_t type;
	catalog_intern_type(b, &bytes, &type);
	return catalog_add_sample(b, file, 0, size, label, type);
}

static int files_read(struct catalog_reader *rd, uint64_t id, const struct catalog_sample *s, void *dst)
{
	int fd = catalog_reader_fd(rd, s->file);
	if (fd < 0)
		return fd;
	int rc = fmt_pread(fd, dst, s->length, s->offset);
	if (rc == -ENODATA)
		return catalog_read_error(rd, id, SEER_EDATASET,
				      "file shorter than its catalogued %llu bytes: restart seerd "
				      "to rescan", (unsigned long long)s->length);
	return rc;
}

const struct fmt_ops fmt_files = {
	.name = "files",
	.accept = files_accept,
	.dir_labels = true,
	.scan = files_scan,
	.read = files_read,
};
