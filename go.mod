module github.com/trellis-dev/trellis

go 1.26.8
