module svcproxy-tools/testsummary

go 1.26.0
