// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)

#ifndef SVCPROXY_JHASH_H
#define SVCPROXY_JHASH_H

#include <linux/types.h>

// The kernel's jhash2 (include/linux/jhash.h), as pkg/pipeline/maglev
// computes it: the Maglev tables svcproxy writes index flows by it.
#define JHASH_INITVAL 0xdeadbeef
#define FLOW_SEED 0x666c6f77
#define rol32(w, s) (((w) << (s)) | ((w) >> (32 - (s))))

#define jhash_mix(a, b, c)                       \
	{                                        \
		a -= c; a ^= rol32(c, 4); c += b;  \
		b -= a; b ^= rol32(a, 6); a += c;  \
		c -= b; c ^= rol32(b, 8); b += a;  \
		a -= c; a ^= rol32(c, 16); c += b; \
		b -= a; b ^= rol32(a, 19); a += c; \
		c -= b; c ^= rol32(b, 4); b += a;  \
	}

#define jhash_final(a, b, c)                 \
	{                                    \
		c ^= b; c -= rol32(b, 14);   \
		a ^= c; a -= rol32(c, 11);   \
		b ^= a; b -= rol32(a, 25);   \
		c ^= b; c -= rol32(b, 16);   \
		a ^= c; a -= rol32(c, 4);    \
		b ^= a; b -= rol32(a, 14);   \
		c ^= b; c -= rol32(b, 24);   \
	}

#define JHASH_MAX_WORDS 12

// jhash2 hashes len (at most JHASH_MAX_WORDS) words of k.
static __always_inline __u32 jhash2(const __u32 *k, __u32 len, __u32 seed)
{
	__u32 a, b, c;
	__u32 i = 0;

	a = b = c = JHASH_INITVAL + (len << 2) + seed;
	for (int r = 0; r < JHASH_MAX_WORDS / 3; r++) {
		if (len - i <= 3)
			break;
		a += k[i];
		b += k[i + 1];
		c += k[i + 2];
		jhash_mix(a, b, c);
		i += 3;
	}
	if (i > JHASH_MAX_WORDS - 3)
		return c;
	switch (len - i) {
	case 3:
		c += k[i + 2];
		/* fallthrough */
	case 2:
		b += k[i + 1];
		/* fallthrough */
	case 1:
		a += k[i];
		jhash_final(a, b, c);
	}
	return c;
}

#endif
