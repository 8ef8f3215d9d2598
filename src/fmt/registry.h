/* The one list of dataset formats.
 *
 * FMT_LIST(X) calls X(name, description) once per format, in the order
 * messages and --help list them. Everything that names formats expands it:
 * the catalog's lookup (fmt/registry.c), the dataset.format choices and their
 * --help text (config.c). A format is added here and in its own file under
 * src/fmt/ defining `const struct fmt_ops fmt_<name>`; nothing else lists
 * names. Header only: no code, no state. */
#ifndef SEER_FMT_REGISTRY_H
#define SEER_FMT_REGISTRY_H

#define FMT_LIST(X)                                                                        \
	X(files, "root/<class>/<file>, one sample per file")                               \
	X(npz, "numpy .npz, samples along an axis of member npz_data")                     \
	X(npy, "numpy .npy, samples along an axis")                                        \
	X(hdf5, "HDF5, rows of dataset hdf5_data")                                         \
	X(tfrecord, "TFRecord, one record per sample")                                     \
	X(indexed, "DLIO indexed_binary: <file> with <file>.off.idx and <file>.sz.idx")      \
	X(tar, "WebDataset tar shards, one sample per key: member tar_extensions, label tar_label")

/* "name: description. " for every format: one string literal for --help. */
#define FMT_HELP_ITEM(name, desc) #name ": " desc ". "
#define FMT_HELP FMT_LIST(FMT_HELP_ITEM)

#endif /* SEER_FMT_REGISTRY_H */
