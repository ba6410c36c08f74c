#!/usr/bin/env perl
# emu_rewrite.pl: turns a .cu file into host C++ for the CUDA emulator: every
# launch `kernel<<<grid, block[, shmem[, stream]]>>>(args);` (template
# arguments, nested parentheses and several lines allowed) becomes
# `emu_launch(kernel, "kernel", emu_cfg(grid, block, ...), args);`; every
# `__shared__ T name[N]...;` is followed by `emu_shared_fresh(name, sizeof name);`
# (the block's first thread to pass it fills it with 0xff bytes: shared memory
# does not keep a previous block's values); a #line directive keeps compiler
# messages pointing at the source.
#   perl emu_rewrite.pl src/cuda/x.cu > build/cuda-emu/gen/x.cpp
use strict;
use warnings;

my $path = shift @ARGV or die "usage: emu_rewrite.pl FILE.cu\n";
open(my $fh, '<', $path) or die "emu_rewrite.pl: $path: $!\n";
my $s = do { local $/; <$fh> };
close $fh;

my $out = '';
my $launches = 0;
while ((my $at = index($s, '<<<')) >= 0) {
  # the kernel expression before <<<: an identifier, maybe with template arguments
  my $e = $at;
  $e-- while $e > 0 && substr($s, $e - 1, 1) =~ /\s/;
  my $k = $e;
  if ($k > 0 && substr($s, $k - 1, 1) eq '>') {
    my $depth = 0;
    while ($k > 0) {
      my $c = substr($s, --$k, 1);
      $depth++ if $c eq '>';
      $depth-- if $c eq '<';
      last if $depth == 0;
    }
    die "emu_rewrite.pl: $path: unbalanced template arguments before <<<\n" if $depth;
  }
  $k-- while $k > 0 && substr($s, $k - 1, 1) =~ /[\w:]/;
  my $kernel = substr($s, $k, $e - $k);
  die "emu_rewrite.pl: $path: no kernel name before <<<\n" unless $kernel =~ /^[\w:]+/;
  # the configuration up to >>>
  my $close = index($s, '>>>', $at);
  die "emu_rewrite.pl: $path: <<< without >>>\n" if $close < 0;
  my $cfg = substr($s, $at + 3, $close - $at - 3);
  # the argument list: balanced parentheses after >>>
  my $p = $close + 3;
  $p++ while $p < length($s) && substr($s, $p, 1) =~ /\s/;
  die "emu_rewrite.pl: $path: no argument list after >>>\n" unless substr($s, $p, 1) eq '(';
  my ($depth, $q) = (0, $p);
  for (; $q < length($s); $q++) {
    my $c = substr($s, $q, 1);
    $depth++ if $c eq '(';
    $depth-- if $c eq ')';
    last if $depth == 0;
  }
  die "emu_rewrite.pl: $path: unbalanced argument list\n" if $depth;
  my $args = substr($s, $p + 1, $q - $p - 1);
  (my $name = $kernel) =~ s/\s+/ /g;
  my $call = "emu_launch($kernel, \"$name\", emu_cfg($cfg)" . ($args =~ /\S/ ? ", $args" : '') . ')';
  $out .= substr($s, 0, $k) . $call;
  $s = substr($s, $q + 1);
  $launches++;
}
$out .= $s;
my $shared = ($out =~ s/(__shared__\s+[^;{}()]*?\b(\w+)\s*(?:\[[^\];]+\]\s*)+;)/$1 emu_shared_fresh($2, sizeof $2);/g) || 0;
print "#line 1 \"$path\"\n", $out;
print STDERR "emu_rewrite.pl: $path: no kernel launch found\n" unless $launches;
