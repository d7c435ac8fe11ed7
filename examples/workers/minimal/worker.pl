#!/usr/bin/perl
# A minimal envelope v1 worker in Perl with core JSON::PP: describe plus one tool, `echo`,
# written straight from docs/envelope-v1.md as a new author would. It parses requests with
# JSON::PP's ordinary decoder (no duplicate-key detection, no bound on string sizes) and
# checks the fields it uses. It passes worker-check's `required` level and fails some
# `strict` checks; tests/conformance/test_minimal_worker.py shows which.
use strict;
use warnings;
use JSON::PP;

my @SUPPORTED = ('1.0');
my $JSON = JSON::PP->new->utf8->canonical;

my %ECHO = (
    name         => 'echo',
    description  => 'Return the given text unchanged.',
    effects      => 'none',
    input_schema => {
        type                 => 'object',
        properties           => { text => { type => 'string', maxLength => 65536 } },
        required             => ['text'],
        additionalProperties => JSON::PP::false,
    },
);

# Write one answer on stdout and exit: 0 for ok and describe, 1 for an error.
sub answer {
    my ($doc, $status) = @_;
    print $JSON->encode($doc), "\n";
    exit $status;
}

sub refuse {
    my ($id, $code, $message) = @_;
    answer({ kind => 'ToolCallResult', version => $SUPPORTED[-1], id => $id,
             status => 'error',
             error => { code => $code, message => $message, retryable => JSON::PP::false } }, 1);
}

binmode STDIN;
binmode STDOUT;
my $input = do { local $/; <STDIN> } // '';
print STDERR "minimal: read ", length($input), " bytes\n"
    if ($ENV{AGENTS_RUNNER_LOG_LEVEL} // '') eq 'debug';

my $req = eval { decode_json($input) };
refuse('-', 'INVALID_REQUEST', 'request is not JSON') unless ref $req eq 'HASH';
my $id = (defined $req->{id} && !ref $req->{id}) ? $req->{id} : '-';  # the reserved id (section 8.2)
my $kind = $req->{kind} // '';
my $version = $req->{version};
refuse($id, 'INVALID_REQUEST', 'kind: expected ToolCallRequest or DescribeRequest')
    unless $kind eq 'ToolCallRequest' || $kind eq 'DescribeRequest';
# Section 8.1: a version is a string, major.minor without leading zeros.
refuse($id, 'INVALID_REQUEST', 'version: missing or not a version (major.minor)')
    unless defined $version && !ref $version && JSON::PP->new->allow_nonref->encode($version) =~ /^"(?:0|[1-9][0-9]{0,3})\.(?:0|[1-9][0-9]{0,3})"$/;
refuse($id, 'UNSUPPORTED_VERSION',
       "version is not supported; supported versions: " . join(', ', @SUPPORTED))
    unless grep { $_ eq $version } @SUPPORTED;

if ($kind eq 'DescribeRequest') {
    answer({ kind => 'DescribeResult', version => '1.0',
             worker => { name => 'example-minimal', version => '0.1.0' },
             supported_versions => \@SUPPORTED, tools => [\%ECHO] }, 0);
}

refuse($id, 'INVALID_REQUEST', 'id: missing') if $id eq '-';
# Section 3.1: extension keys are vendor.domain/name, whatever their value.
refuse($id, 'INVALID_REQUEST', 'extensions: a key that is not vendor.domain/name')
    if ref $req->{extensions} eq 'HASH'
    && grep { !m{^[a-z][a-z0-9-]*(\.[a-z0-9-]+)*/[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\z} } keys %{ $req->{extensions} };
my $tool = ref $req->{tool} eq 'HASH' ? $req->{tool}{name} // '' : '';
refuse($id, 'UNKNOWN_TOOL', 'no such tool; this worker has: echo') unless $tool eq 'echo';
my $arguments = $req->{arguments};
refuse($id, 'INVALID_REQUEST', 'arguments: expected an object') unless ref $arguments eq 'HASH';

# The one tool: the schema says {"text": string <= 65536}, nothing else.
my @extra = grep { $_ ne 'text' } keys %$arguments;
my $text = $arguments->{text};
refuse($id, 'INVALID_ARGUMENTS', "arguments: unexpected property") if @extra;
refuse($id, 'INVALID_ARGUMENTS', "arguments['text']: required, a string of at most 65536")
    unless defined $text && !ref $text && length($text) <= 65536;

if (defined $req->{deadline_ms} && $req->{deadline_ms} < time() * 1000) {
    refuse($id, 'DEADLINE_EXCEEDED', 'the deadline passed before the call started');
}
my $result = { kind => 'ToolCallResult', version => $version, id => $id, status => 'ok',
               output => { type => 'text', content => $text } };
my $max = ref $req->{limits} eq 'HASH' ? $req->{limits}{max_result_bytes} // 1048576 : 1048576;
refuse($id, 'LIMIT_EXCEEDED', "the result is over max_result_bytes ($max)")
    if length($JSON->encode($result)) + 1 > $max;
answer($result, 0);
