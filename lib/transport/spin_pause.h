/*
 * spin_pause.h — the pause between two polls of a word another core writes.
 */
#ifndef CHORUS_SPIN_PAUSE_H
#define CHORUS_SPIN_PAUSE_H

/* Tells the CPU this is a spin-wait: it saves power and lets a hypervisor run another virtual
 * CPU (pause-loop exiting) instead of this one spinning away its time slice. */
static inline void spin_pause(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

#endif
