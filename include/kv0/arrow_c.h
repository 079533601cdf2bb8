/* The Arrow C Data Interface and C Stream Interface: the ABI kv0 uses to pass
 * schemas and record batches to and from the Lance library without linking
 * any Arrow implementation.
 *
 * The layouts below are fixed by the Arrow specification
 * (format/CDataInterface and format/CStreamInterface) and must not change.
 * Each part sits behind the macro that the specification names, so this header
 * coexists with any other header that also defines these structs.
 *
 * Ownership in one sentence: whoever holds a struct whose release is non-NULL
 * owns it and must call release exactly once; release sets it to NULL. */
#ifndef KV0_ARROW_C_H_
#define KV0_ARROW_C_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
  /* Type description. */
  const char* format;
  const char* name;
  const char* metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema** children;
  struct ArrowSchema* dictionary;

  /* Release callback. */
  void (*release)(struct ArrowSchema*);
  /* Opaque producer-specific data. */
  void* private_data;
};

struct ArrowArray {
  /* Array data description. */
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void** buffers;
  struct ArrowArray** children;
  struct ArrowArray* dictionary;

  /* Release callback. */
  void (*release)(struct ArrowArray*);
  /* Opaque producer-specific data. */
  void* private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE

struct ArrowArrayStream {
  /* Fills *out with the schema of the stream's arrays. Returns 0 or an errno
   * value. */
  int (*get_schema)(struct ArrowArrayStream*, struct ArrowSchema* out);
  /* Fills *out with the next array, or marks it released at end of stream.
   * Returns 0 or an errno value. */
  int (*get_next)(struct ArrowArrayStream*, struct ArrowArray* out);
  /* After a nonzero return from another callback: a description of the error,
   * or NULL. Valid until the next call on the stream. */
  const char* (*get_last_error)(struct ArrowArrayStream*);

  /* Release callback. */
  void (*release)(struct ArrowArrayStream*);
  /* Opaque producer-specific data. */
  void* private_data;
};

#endif /* ARROW_C_STREAM_INTERFACE */

#ifdef __cplusplus
}
#endif

#endif /* KV0_ARROW_C_H_ */
