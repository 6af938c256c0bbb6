# A 32-bit x86 program that sleeps a second at a time, for ever: made with binutils alone (as --32,
# ld -m elf_i386), no 32-bit C library needed.
.globl _start
.text
_start:
    movl $162, %eax      # nanosleep
    leal ts, %ebx
    xorl %ecx, %ecx
    int $0x80
    jmp _start
.data
ts: .long 1, 0
