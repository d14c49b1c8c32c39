/* Make a process see a smaller x86 class than its CPU's: LD_PRELOADed with
 * CANONQNN_CPUID_CLASS set, it turns on CPUID faulting (Linux arch_prctl(ARCH_SET_CPUID, 0):
 * the CPUID instruction raises SIGSEGV) and answers each CPUID from a SIGSEGV handler with the
 * CPU's own answer less the features of the classes above the one asked. Runtimes that pick
 * their kernels from CPUID (cpuinfo, hence XNNPACK) then pick that class's kernels, which the
 * CPU can run. Test-only: lets an AVX-512 host run the AVX2 kernels as an AVX2 host would.
 *
 * Faulting is per thread, inherited by threads and forks, reset by execve (a child that is a
 * new program is masked again by LD_PRELOAD). Any other SIGSEGV goes to the handler the
 * program installed, or ends the process as it would have without this library. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define ARCH_SET_CPUID 0x1012
#define BIT(n) (1u << (n))

/* 1: masking; 0: CANONQNN_CPUID_CLASS unset; -errno: it could not be turned on. */
static int mask_state;
static volatile unsigned long emulated;
/* The SIGSEGV handling the program asked for (kept out of the kernel: ours stays installed). */
static struct sigaction program_action;
static int (*real_sigaction)(int, const struct sigaction *, struct sigaction *);

/* Features cleared per class: leaf 7 subleaf 0 EBX, ECX, EDX; subleaf 1 EAX, EDX. */
struct mask {
    const char *name;
    uint32_t l7_ebx, l7_ecx, l7_edx, l7s1_eax, l7s1_edx;
};

static const struct mask MASKS[] = {
    /* AVX2+FMA3 with nothing newer: every AVX-512 subset, the VEX forms introduced with or
     * after AVX-512 (AVX-VNNI, AVX-IFMA, ...), AMX and AVX10. */
    {"x86-avx2",
     /* AVX512F DQ IFMA PF ER CD BW VL */
     BIT(16) | BIT(17) | BIT(21) | BIT(26) | BIT(27) | BIT(28) | BIT(30) | BIT(31),
     /* AVX512_VBMI VBMI2 VNNI BITALG VPOPCNTDQ */
     BIT(1) | BIT(6) | BIT(11) | BIT(12) | BIT(14),
     /* AVX512_4VNNIW 4FMAPS VP2INTERSECT; AMX-BF16, AVX512_FP16, AMX-TILE, AMX-INT8 */
     BIT(2) | BIT(3) | BIT(8) | BIT(22) | BIT(23) | BIT(24) | BIT(25),
     /* AVX-VNNI, AVX512_BF16, AMX-FP16, AVX-IFMA */
     BIT(4) | BIT(5) | BIT(21) | BIT(23),
     /* AVX-VNNI-INT8, AVX-NE-CONVERT, AMX-COMPLEX, AVX-VNNI-INT16, AVX10 */
     BIT(4) | BIT(5) | BIT(8) | BIT(10) | BIT(19)},
};
static const struct mask *active;

static long set_cpuid(int enabled) { return syscall(SYS_arch_prctl, ARCH_SET_CPUID, enabled); }

static void cpuid(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
    __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3])
                     : "a"(leaf), "c"(sub));
}

static void apply(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
    if (leaf == 7 && sub == 0) {
        r[1] &= ~active->l7_ebx;
        r[2] &= ~active->l7_ecx;
        r[3] &= ~active->l7_edx;
    } else if (leaf == 7 && sub == 1) {
        r[0] &= ~active->l7s1_eax;
        r[3] &= ~active->l7s1_edx;
    } else if (leaf == 0x24) {
        r[0] = r[1] = r[2] = r[3] = 0; /* AVX10's leaf: its feature bit is cleared */
    }
}

static void fall_through(int sig, siginfo_t *info, void *context) {
    struct sigaction program = program_action;
    if (program.sa_handler == SIG_IGN && info->si_code > 0) {
        program.sa_handler = SIG_DFL; /* the kernel ends a process ignoring a fault too */
    }
    if (program.sa_handler == SIG_IGN) {
        return;
    }
    if (program.sa_handler != SIG_DFL) {
        if (program.sa_flags & SA_RESETHAND) {
            program_action.sa_handler = SIG_DFL;
        }
        if (program.sa_flags & SA_SIGINFO) {
            program.sa_sigaction(sig, info, context);
        } else {
            program.sa_handler(sig);
        }
        return;
    }
    /* The default action: pending now, delivered when this handler returns. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    real_sigaction(SIGSEGV, &dfl, NULL);
    raise(SIGSEGV);
}

static void on_segv(int sig, siginfo_t *info, void *context) {
    ucontext_t *uc = context;
    greg_t *regs = uc->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)regs[REG_RIP];
    /* A faulting CPUID is a general-protection fault (SI_KERNEL) at an instruction the CPU
     * fetched, so its bytes can be read; a page fault's RIP may be unmapped. */
    if (info->si_code != SI_KERNEL || ip[0] != 0x0F || ip[1] != 0xA2) {
        fall_through(sig, info, context);
        return;
    }
    uint32_t leaf = (uint32_t)regs[REG_RAX], sub = (uint32_t)regs[REG_RCX], r[4];
    int saved = errno;
    set_cpuid(1);
    cpuid(leaf, sub, r);
    set_cpuid(0);
    errno = saved;
    apply(leaf, sub, r);
    regs[REG_RAX] = r[0];
    regs[REG_RBX] = r[1];
    regs[REG_RCX] = r[2];
    regs[REG_RDX] = r[3];
    regs[REG_RIP] += 2;
    emulated++;
}

/* The program's own SIGSEGV handler is recorded, not installed (ours must stay). */
int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    if (!real_sigaction) {
        real_sigaction = dlsym(RTLD_NEXT, "sigaction");
    }
    if (sig != SIGSEGV || mask_state != 1) {
        return real_sigaction(sig, act, old);
    }
    if (old) {
        *old = program_action;
    }
    if (act) {
        program_action = *act;
    }
    return 0;
}

sighandler_t signal(int sig, sighandler_t handler) {
    struct sigaction act, old;
    memset(&act, 0, sizeof act);
    act.sa_handler = handler;
    act.sa_flags = SA_RESTART;
    sigemptyset(&act.sa_mask);
    return sigaction(sig, &act, &old) == 0 ? old.sa_handler : SIG_ERR;
}

__attribute__((constructor)) static void start(void) {
    real_sigaction = dlsym(RTLD_NEXT, "sigaction");
    const char *name = getenv("CANONQNN_CPUID_CLASS");
    if (!name || !*name) {
        return;
    }
    for (size_t i = 0; i < sizeof MASKS / sizeof *MASKS; i++) {
        if (strcmp(name, MASKS[i].name) == 0) {
            active = &MASKS[i];
        }
    }
    if (!active) {
        mask_state = -EINVAL;
        return;
    }
    struct sigaction act;
    memset(&act, 0, sizeof act);
    act.sa_sigaction = on_segv;
    act.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigfillset(&act.sa_mask); /* no handler may run CPUID while it is enabled */
    memset(&program_action, 0, sizeof program_action);
    program_action.sa_handler = SIG_DFL;
    if (real_sigaction(SIGSEGV, &act, NULL) != 0) {
        mask_state = -errno;
        return;
    }
    if (set_cpuid(0) != 0) {
        mask_state = -errno;
        real_sigaction(SIGSEGV, &program_action, NULL);
        return;
    }
    mask_state = 1;
}

/* For the test harness (ctypes): the state above, the CPUIDs answered, and a CPUID run here
 * (so through the mask when it is on). */
int canonqnn_cpuid_mask_state(void) { return mask_state; }
unsigned long canonqnn_cpuid_emulated(void) { return emulated; }
void canonqnn_cpuid(uint32_t leaf, uint32_t sub, uint32_t *out) { cpuid(leaf, sub, out); }
