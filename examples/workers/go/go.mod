module example.com/agents-runner/example-go

go 1.19
